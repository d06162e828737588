"""Decodes one ingest batch: format v1 (JSON) or v2 (binary columns), told apart by Content-Type.

Every rule is listed in docs/ingest-format.md. A batch is accepted whole or rejected whole: the first
violation raises IngestError naming the field, and nothing is written.
"""

from __future__ import annotations

from gpuscope.collector.ingest import binary_v2, json_v1
from gpuscope.collector.ingest.batch import MIN_TIMESTAMP, IngestError, decompress
from gpuscope.collector.store.batch import Batch

__all__ = ["Batch", "IngestError", "decode", "decompress"]


def decode(raw: bytes, now: float, oldest: float = MIN_TIMESTAMP, content_type: str | None = None) -> Batch:
    """`raw`: the body after Content-Encoding; `oldest`: samples before this (the retention horizon)
    are refused, as they would be dropped anyway."""
    window = (oldest, now)
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    if media_type == binary_v2.CONTENT_TYPE:
        return binary_v2.decode(raw, window)
    if media_type not in ("", "application/json"):
        raise IngestError(
            415, ("header", "Content-Type"), f"unsupported {media_type!r}: application/json or {binary_v2.CONTENT_TYPE}"
        )
    return json_v1.decode(raw, window)
