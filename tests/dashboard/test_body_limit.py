"""Request bodies are capped before they are read (dashboard/body_limit.py), on the real server:
with a Content-Length, chunked without one, and chunked by a client that never finishes. A body under
the cap still reaches its callback."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpuscope.dashboard import auth
from gpuscope.dashboard.context import MAX_BODY_BYTES, DashboardOptions
from tests.dashboard.helpers import serving

CALLBACK = "/_dash-update-component"
JSON = {"Content-Type": "application/json"}
REFUSED = f"Request body too large: the dashboard accepts at most {MAX_BODY_BYTES} bytes"


def route_callback(search: str) -> bytes:
    """The router's callback, as the browser posts it on opening /alerts, padded through `search`."""
    return json.dumps(
        {
            "output": "page.children",
            "outputs": {"id": "page", "property": "children"},
            "inputs": [{"id": "url", "property": "pathname", "value": "/alerts"}],
            "state": [{"id": "url", "property": "search", "value": search}],
            "changedPropIds": ["url.pathname"],
        }
    ).encode()


def padded(size: int) -> bytes:
    body = route_callback("")
    return route_callback("x" * (size - len(body)))


def in_chunks(body: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


@pytest.fixture(scope="module")
def dashboard() -> Iterator[str]:
    with serving() as url:
        yield url


def test_a_body_up_to_the_cap_reaches_its_callback(dashboard: str) -> None:
    assert DashboardOptions().max_body_bytes == MAX_BODY_BYTES == 1 << 20
    for body in (route_callback(""), padded(MAX_BODY_BYTES)):
        answer = httpx.post(dashboard + CALLBACK, content=body, headers=JSON, timeout=30)
        assert answer.status_code == 200 and '"Alerts"' in answer.text, answer.text[:200]
    chunked = httpx.post(dashboard + CALLBACK, content=in_chunks(padded(MAX_BODY_BYTES)), headers=JSON, timeout=30)
    assert chunked.status_code == 200, chunked.text[:200]


def test_a_declared_body_over_the_cap_is_refused(dashboard: str) -> None:
    answer = httpx.post(dashboard + CALLBACK, content=padded(MAX_BODY_BYTES + 1), headers=JSON, timeout=30)
    assert answer.status_code == 413 and answer.text.startswith(REFUSED), answer.text[:200]


def test_a_chunked_body_over_the_cap_is_refused(dashboard: str) -> None:
    body = in_chunks(padded(2 * MAX_BODY_BYTES))
    answer = httpx.post(dashboard + CALLBACK, content=body, headers=JSON, timeout=30)
    assert answer.request.headers["Transfer-Encoding"] == "chunked"
    assert answer.status_code == 413 and answer.text.startswith(REFUSED), answer.text[:200]


def test_a_chunked_body_is_refused_while_it_streams(dashboard: str) -> None:
    """A client that sends past the cap and then waits, its body unfinished, gets its 413 at once:
    the server stopped reading at the cap rather than waiting for (and keeping) the rest."""
    port = int(dashboard.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(
            f"POST {CALLBACK} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n".encode()
        )
        for chunk in in_chunks(b"[" + b" " * (MAX_BODY_BYTES + 64 * 1024)):
            client.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))  # and never the last, empty chunk
        answer = read_answer(client)  # a timeout here: the server is waiting for the rest
    assert answer.startswith("HTTP/1.1 413 "), answer
    assert REFUSED in answer


def read_answer(client: socket.socket) -> str:
    """The whole answer: its head, then as many body bytes as Content-Length says (they may come in a
    later segment than the head)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += client.recv(4096) or b"\r\n\r\n"
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
        0,
    )
    while len(body) < length:
        more = client.recv(4096)
        if not more:
            break
        body += more
    return (head + b"\r\n\r\n" + body).decode()


def test_an_oversized_body_is_refused_before_the_login_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hashes: list[tuple[object, ...]] = []

    def verify(*args: object) -> bool:
        hashes.append(args)
        return True

    monkeypatch.setattr(auth, "verify", verify)
    users = tmp_path / "users"
    users.write_text(f"ada:{auth.hash_password('pw', iterations=1000)}\n")
    options = DashboardOptions(max_body_bytes=4096)  # the cap is a setting
    with serving(options, auth.read_users(users)) as url:
        answer = httpx.post(url + CALLBACK, content=padded(4097), headers=JSON, auth=("ada", "pw"), timeout=30)
        assert answer.status_code == 413 and "at most 4096 bytes" in answer.text
        assert hashes == []
        answer = httpx.post(url + CALLBACK, content=padded(4096), headers=JSON, auth=("ada", "pw"), timeout=30)
        assert answer.status_code == 200 and len(hashes) == 1
