"""Decodes one ingest batch: format v1 (JSON) or v2 (binary columns), told apart by Content-Type.

Every rule is listed in docs/ingest-format.md. A batch is accepted whole or rejected whole: the first
violation raises IngestError naming the field, and nothing is written.
"""

from __future__ import annotations

from gpuscope.collector.ingest import binary_v2, json_v1
from gpuscope.collector.ingest.batch import (
    MAX_JSON_BYTES,
    MIN_TIMESTAMP,
    IngestError,
    check_encoding,
    decompress,
)
from gpuscope.collector.ingest.header import Scope
from gpuscope.collector.store.batch import Batch

__all__ = ["Batch", "IngestError", "Scope", "check_encoding", "decode", "decode_body", "decompress", "media_type"]

JSON = "application/json"


def media_type(content_type: str | None) -> str:
    """The body's format by its Content-Type (none: JSON); another type: 415."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == binary_v2.CONTENT_TYPE:
        return media
    if media not in ("", JSON):
        raise IngestError(415, ("header", "Content-Type"), f"unsupported {media!r}: {JSON} or {binary_v2.CONTENT_TYPE}")
    return JSON


def decode(
    raw: bytes, now: float, oldest: float = MIN_TIMESTAMP, content_type: str | None = None, scope: Scope = None
) -> Batch:
    """`raw`: the body after Content-Encoding; `oldest`: samples before this (the retention horizon)
    are refused, as they would be dropped anyway; `scope`: the (cluster, node) a node's token may send
    for (None: any), 403 otherwise."""
    window = (oldest, now)
    if media_type(content_type) == binary_v2.CONTENT_TYPE:
        return binary_v2.decode(raw, window, scope)
    return json_v1.decode(raw, window, scope)


def decode_body(
    body: bytes,
    *,
    content_encoding: str | None,
    content_type: str | None,
    max_bytes: int,
    now: float,
    oldest: float,
    scope: Scope = None,
) -> Batch:
    """A request body as sent: decompressed (at most `max_bytes`, and a JSON body at most
    MAX_JSON_BYTES: 413 as soon as the output passes it), then decoded."""
    limit = min(max_bytes, MAX_JSON_BYTES) if media_type(content_type) == JSON else max_bytes
    raw = decompress(body, content_encoding, limit)
    return decode(raw, now, oldest, content_type, scope)
