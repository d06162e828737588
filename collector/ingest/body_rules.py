"""Which requests are ingest's and which bodies it takes, decided once for the route (api/ingest.py),
its fast path (api/fast_ingest.py), the guard every other request passes (api/guard.py) and the decoder
(wire.py): the media types (format v1 JSON, v2 binary columns), the Content-Encodings, and how large a
body may be, as sent and once decoded. The collector's other routes take small bodies only (the guard's)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuscope.collector.ingest.batch import MAX_JSON_BYTES, IngestError
from gpuscope.core.ingest_wire import BINARY_CONTENT_TYPE, INGEST_PATH, JSON_CONTENT_TYPE

JSON = JSON_CONTENT_TYPE  # format version 1; a body without a Content-Type is taken as this
BINARY = BINARY_CONTENT_TYPE  # format version 2
MEDIA_TYPES = (JSON, BINARY)
ENCODINGS = ("gzip", "identity")  # identity: none
# A body as sent (and once decompressed), unless the collector is started with another limit. A
# batch of a 4,096-GPU node's minute is a few MB in version 2.
DEFAULT_MAX_BODY_BYTES = 32 * 2**20


@dataclass(frozen=True)
class BodyRules:
    """What one request's body must be, from its headers, before any of it is read."""

    media: str  # JSON or BINARY
    encoding: str  # "identity" or "gzip"
    max_sent_bytes: int  # the body as it arrives
    max_decoded_bytes: int  # the body after its Content-Encoding (JSON text: at most MAX_JSON_BYTES)


def body_rules(content_type: str | None, content_encoding: str | None, max_body_bytes: int) -> BodyRules:
    """The rules for a body of these headers, under the collector's `max_body_bytes`; IngestError 415
    for an encoding (checked first) or a media type ingest does not take."""
    encoding = check_encoding(content_encoding)
    media = media_type(content_type)
    # Parsing JSON costs far more than its size (batch.py, MAX_JSON_BYTES): JSON text has its own bound.
    decoded = min(max_body_bytes, MAX_JSON_BYTES) if media == JSON else max_body_bytes
    return BodyRules(media, encoding, decoded if encoding == "identity" else max_body_bytes, decoded)


def media_type(content_type: str | None) -> str:
    """The body's format by its Content-Type (none: JSON); another type: 415."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == "":
        return JSON
    if media not in MEDIA_TYPES:
        raise IngestError(415, ("header", "Content-Type"), f"unsupported {media!r}: {JSON} or {BINARY}")
    return media


def check_encoding(content_encoding: str | None) -> str:
    """'identity' or 'gzip'; anything else: 415."""
    encoding = (content_encoding or "identity").strip().lower()
    if encoding not in ENCODINGS:
        raise IngestError(415, ("header", "Content-Encoding"), f"unsupported encoding {encoding!r}; use gzip")
    return encoding


def is_ingest(scope: Mapping[str, Any]) -> bool:
    """The ingest request (an ASGI scope): the fast path answers it, the guard leaves it alone. It checks
    its own tokens, and its body is read under these rules, not the small limit of every other route."""
    return scope["type"] == "http" and scope["path"] == INGEST_PATH and scope["method"] == "POST"
