"""Decodes one ingest batch: format v1 (JSON) or v2 (binary columns), told apart by Content-Type.

Every rule is listed in docs/ingest-format.md. A batch is accepted whole or rejected whole: the first
violation raises IngestError naming the field, and nothing is written. Which bodies are taken at all
(media types, encodings, sizes) is body_rules.py's to say.
"""

from __future__ import annotations

from gpuscope.collector.ingest import binary_v2, json_v1
from gpuscope.collector.ingest.batch import MIN_TIMESTAMP, IngestError, decompress
from gpuscope.collector.ingest.body_rules import BINARY, JSON, BodyRules, body_rules, check_encoding, media_type
from gpuscope.collector.ingest.header import Scope
from gpuscope.collector.store.batch import Batch

__all__ = [
    "JSON",
    "Batch",
    "BodyRules",
    "IngestError",
    "Scope",
    "body_rules",
    "check_encoding",
    "decode",
    "decode_body",
    "decompress",
    "media_type",
]


def decode(
    raw: bytes, now: float, oldest: float = MIN_TIMESTAMP, content_type: str | None = None, scope: Scope = None
) -> Batch:
    """`raw`: the body after Content-Encoding; `oldest`: samples before this (the retention horizon)
    are refused, as they would be dropped anyway; `scope`: the (cluster, node) a node's token may send
    for (None: any), 403 otherwise."""
    return _decode_as(media_type(content_type), raw, (oldest, now), scope)


def decode_body(body: bytes, *, rules: BodyRules, now: float, oldest: float, scope: Scope = None) -> Batch:
    """A request body as sent: decompressed (at most rules.max_decoded_bytes: 413 as soon as the
    output passes it), then decoded as rules.media."""
    raw = decompress(body, rules.encoding, rules.max_decoded_bytes)
    return _decode_as(rules.media, raw, (oldest, now), scope)


def _decode_as(media: str, raw: bytes, window: tuple[float, float], scope: Scope) -> Batch:
    if media == BINARY:
        return binary_v2.decode(raw, window, scope)
    return json_v1.decode(raw, window, scope)
