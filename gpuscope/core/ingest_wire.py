"""Where an exporter sends its batches and the media types it sends them as (docs/ingest-format.md): the
exporter's pusher writes them and the collector's ingest accepts them, so they live below both."""

from __future__ import annotations

INGEST_PATH = "/api/v1/samples"
JSON_CONTENT_TYPE = "application/json"  # format version 1; a body without a Content-Type is taken as this
BINARY_CONTENT_TYPE = "application/x-gpuscope-samples"  # format version 2: binary columns
