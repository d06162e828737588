"""Ingest's media types and body limits, decided once (collector/ingest/body_rules.py) for the route,
its fast path, the guard and the decoder."""

from __future__ import annotations

import gzip

import pytest

from gpuscope.collector.ingest.batch import MAX_JSON_BYTES, IngestError
from gpuscope.collector.ingest.body_rules import (
    BINARY,
    DEFAULT_MAX_BODY_BYTES,
    INGEST_PATH,
    JSON,
    BodyRules,
    body_rules,
    is_ingest,
)
from gpuscope.collector.ingest.wire import decode_body

LIMIT = DEFAULT_MAX_BODY_BYTES


@pytest.mark.parametrize(
    ("content_type", "encoding", "expected"),
    [
        (None, None, BodyRules(JSON, "identity", MAX_JSON_BYTES, MAX_JSON_BYTES)),
        ("application/json; charset=utf-8", "identity", BodyRules(JSON, "identity", MAX_JSON_BYTES, MAX_JSON_BYTES)),
        ("Application/JSON", "GZIP", BodyRules(JSON, "gzip", LIMIT, MAX_JSON_BYTES)),
        (BINARY, None, BodyRules(BINARY, "identity", LIMIT, LIMIT)),
        (BINARY, "gzip", BodyRules(BINARY, "gzip", LIMIT, LIMIT)),
    ],
)
def test_each_body_gets_its_limits(content_type: str | None, encoding: str | None, expected: BodyRules) -> None:
    assert body_rules(content_type, encoding, LIMIT) == expected


def test_a_smaller_collector_limit_bounds_json_too() -> None:
    assert body_rules(JSON, None, 1000) == BodyRules(JSON, "identity", 1000, 1000)
    assert body_rules(JSON, "gzip", 1000) == BodyRules(JSON, "gzip", 1000, 1000)


def test_what_ingest_does_not_take_is_415_encoding_first() -> None:
    with pytest.raises(IngestError) as refused:
        body_rules("text/plain", "br", LIMIT)
    assert (refused.value.status, refused.value.loc) == (415, ("header", "Content-Encoding"))
    assert refused.value.msg == "unsupported encoding 'br'; use gzip"
    with pytest.raises(IngestError) as refused:
        body_rules("text/plain", None, LIMIT)
    assert (refused.value.status, refused.value.loc) == (415, ("header", "Content-Type"))
    assert refused.value.msg == f"unsupported 'text/plain': {JSON} or {BINARY}"


def test_the_decoded_limit_holds_for_gzip() -> None:
    rules = body_rules(JSON, "gzip", 100)
    with pytest.raises(IngestError) as refused:
        decode_body(gzip.compress(b" " * 101), rules=rules, now=0.0, oldest=0.0)
    assert (refused.value.status, refused.value.msg) == (413, "decompressed body exceeds 100 bytes")


def test_the_fast_path_and_the_guard_agree_on_the_ingest_request() -> None:
    assert is_ingest({"type": "http", "path": INGEST_PATH, "method": "POST"})
    assert not is_ingest({"type": "http", "path": INGEST_PATH, "method": "GET"})
    assert not is_ingest({"type": "http", "path": "/api/v1/silences", "method": "POST"})
    assert not is_ingest({"type": "websocket", "path": INGEST_PATH, "method": "POST"})
