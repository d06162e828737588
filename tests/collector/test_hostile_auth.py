"""Hostile requests to the collector's non-ingest routes (issue 16): the token is checked before any body
is read or parsed, bodies are capped, each refusal says which case it is (401 no or wrong token, 403 a
token that is not allowed here, 404 changes switched off), and /metrics wants the read token when one is
set. All traffic goes to a collector on 127.0.0.1; every socket has a timeout."""

from __future__ import annotations

import json
import secrets
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from tests.processes import RunningCollector, running_collector

ADMIN = "admin-" + secrets.token_urlsafe(16)
READER = "reader-" + secrets.token_urlsafe(16)
INGEST = "ingest-" + secrets.token_urlsafe(16)
SILENCE = {"matchers": ["node=gpu-07"], "duration_s": 60}
SILENCES = "/api/v1/silences"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


@pytest.fixture
def guarded(dsn: str) -> Iterator[RunningCollector]:
    """A collector with every token set: ingest, read and admin."""
    with running_collector(dsn, token=INGEST, read_token=READER, admin_token=ADMIN) as collector:
        yield collector


def raw_request(collector: RunningCollector, head: str, body: bytes = b"", timeout: float = 5.0) -> int | None:
    """Send a request line and headers (and the start of a body) over a plain socket, and the status of
    the answer; None when no answer came within `timeout` (the server was still waiting for the body)."""
    port = urlsplit(collector.url).port
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        received = b""
        try:
            while b"\r\n" not in received:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                received += chunk
        except TimeoutError:
            return None
    return int(received.split(b" ", 2)[1]) if received else None


def test_a_broken_body_without_a_token_is_401_not_422(guarded: RunningCollector) -> None:
    for body in (b"{", b"[1, 2", b"\xff\xfe", json.dumps(SILENCE).encode()):
        response = httpx.post(guarded.url + SILENCES, content=body, headers={"Content-Type": "application/json"})
        assert response.status_code == 401, (body, response.text)
        assert response.headers["WWW-Authenticate"] == "Bearer"


def test_without_a_token_the_body_is_never_read(guarded: RunningCollector) -> None:
    """48 MB announced, one byte sent: the answer comes at once, so the collector did not wait for (nor
    buffer, nor parse) the body. Before the fix it waited for all 48 MB, then parsed them."""
    head = f"POST {SILENCES} HTTP/1.1\nHost: 127.0.0.1\nContent-Type: application/json\nContent-Length: {48 * 2**20}\n"
    assert raw_request(guarded, head, b"{") == 401
    wrong = head + "Authorization: Bearer " + "x" * 24 + "\n"
    assert raw_request(guarded, wrong, b"{") == 401
    chunked = f"DELETE {SILENCES}/1 HTTP/1.1\nHost: 127.0.0.1\nTransfer-Encoding: chunked\n"
    assert raw_request(guarded, chunked, b"1000\r\n") == 401


def test_a_valid_token_that_is_not_the_admin_token_is_403(guarded: RunningCollector) -> None:
    for token in (READER, INGEST):
        response = httpx.post(guarded.url + SILENCES, json=SILENCE, headers=bearer(token))
        assert response.status_code == 403, (token[:6], response.text)
        assert "admin" in response.json()["detail"]
        assert httpx.delete(f"{guarded.url}{SILENCES}/1", headers=bearer(token)).status_code == 403
    head = f"POST {SILENCES} HTTP/1.1\nHost: 127.0.0.1\nContent-Length: {48 * 2**20}\nAuthorization: Bearer {READER}\n"
    assert raw_request(guarded, head, b"{") == 403, "refused before the body too"
    created = httpx.post(guarded.url + SILENCES, json=SILENCE, headers=bearer(ADMIN))
    assert created.status_code == 201, created.text


def test_without_an_admin_token_changes_are_404_before_any_body(collector: RunningCollector) -> None:
    response = httpx.post(collector.url + SILENCES, json=SILENCE)
    assert response.status_code == 404 and "--admin-token-file" in response.json()["detail"]
    assert httpx.post(collector.url + SILENCES, content=b"{").status_code == 404
    assert httpx.delete(f"{collector.url}{SILENCES}/1", headers=bearer("y" * 20)).status_code == 404
    head = f"POST {SILENCES} HTTP/1.1\nHost: 127.0.0.1\nContent-Length: {48 * 2**20}\n"
    assert raw_request(collector, head, b"{") == 404
    assert httpx.get(collector.url + SILENCES).json() == [], "reading them stays open"
    paths = httpx.get(collector.url + "/openapi.json").json()["paths"]
    assert set(paths[SILENCES]) == {"get"} and f"{SILENCES}/{{silence_id}}" not in paths, "nor are they documented"
    assert "post" in paths["/api/v1/samples"], "ingest is"


def test_bodies_off_the_ingest_route_are_capped(guarded: RunningCollector) -> None:
    padded = json.dumps(SILENCE).encode() + b" " * (100 * 1024)  # valid JSON, 100 KiB
    declared = httpx.post(guarded.url + SILENCES, content=padded, headers=bearer(ADMIN))
    assert declared.status_code == 413 and "65536" in declared.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the cap holds while the body streams
        yield json.dumps(SILENCE).encode()
        for _ in range(100):
            yield b" " * 1024

    streamed = httpx.post(guarded.url + SILENCES, content=chunks(), headers=bearer(ADMIN))
    assert streamed.status_code == 413
    head = f"POST {SILENCES} HTTP/1.1\nHost: 127.0.0.1\nContent-Length: {48 * 2**20}\nAuthorization: Bearer {ADMIN}\n"
    assert raw_request(guarded, head, b"{") == 413, "a declared length over the cap is refused before reading"
    small = httpx.post(
        guarded.url + SILENCES, content=json.dumps(SILENCE).encode() + b" " * 1000, headers=bearer(ADMIN)
    )
    assert small.status_code == 201, small.text
    get_body = httpx.request("GET", guarded.url + SILENCES, content=b" " * (100 * 1024), headers=bearer(READER))
    assert get_body.status_code == 413, "a read route's body is capped too"


@pytest.mark.parametrize(
    "body",
    [
        b'{"matchers": ["node=a"], "duration_s": 60, "comment": "fan\\u0000swap"}',  # NUL: no text column holds it
        b'{"matchers": ["node=a"], "duration_s": 60, "created_by": "\\u0000"}',
        b'{"matchers": ["node=\\u0000"], "duration_s": 60}',
        b'{"matchers": ["node=\\ud800"], "duration_s": 60}',  # a lone surrogate: no UTF-8 for it
        b'{"matchers": ["node=a"], "duration_s": 60, "comment": "x\\ud800y"}',
    ],
)
def test_a_value_no_column_can_hold_is_422_not_500(guarded: RunningCollector, body: bytes) -> None:
    response = httpx.post(guarded.url + SILENCES, content=body, headers=bearer(ADMIN))
    assert response.status_code == 422, response.text
    assert response.json()["detail"]


def test_metrics_and_every_route_but_healthz_want_the_read_token(guarded: RunningCollector) -> None:
    """All but /healthz and the /docs page with its Swagger UI files, which ask for the token themselves
    (tests/collector/test_docs_token.py)."""
    for path in ("/metrics", "/api/v1/fleet", "/api/v1/alerts", SILENCES, "/openapi.json"):
        assert httpx.get(guarded.url + path).status_code == 401, path
        assert httpx.get(guarded.url + path, headers=bearer("w" * 24)).status_code == 401, path
        assert httpx.get(guarded.url + path, headers=bearer(INGEST)).status_code == 403, path
        assert httpx.get(guarded.url + path, headers=bearer(READER)).status_code == 200, path
    metrics = httpx.get(guarded.url + "/metrics", headers=bearer(READER))
    assert "gpuscope_ingest" in metrics.text or "gpuscope_" in metrics.text
    assert httpx.get(guarded.url + "/healthz").status_code == 200, "health stays open"
    listed = httpx.get(guarded.url + SILENCES, headers=bearer(ADMIN))
    assert listed.status_code == 200, "the admin token reads too (the CLI lists silences with it)"


def test_without_a_read_token_metrics_stay_open(collector: RunningCollector) -> None:
    assert httpx.get(collector.url + "/metrics").status_code == 200
    assert httpx.get(collector.url + "/api/v1/fleet").status_code == 200
