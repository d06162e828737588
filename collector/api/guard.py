"""What every request FastAPI serves goes through first (the ingest request, body_rules.is_ingest,
does not come here: the fast path in api/fast_ingest.py answers it with its own node tokens and body
rules, collector/ingest/body_rules.py; should it reach the guard, it is passed on untouched).

In this order, before any route, dependency or body model runs:
1. The token. A change (any method but GET, HEAD and OPTIONS) wants the admin token: 404 when the
   collector has none (changes are switched off), 403 for another valid token (read or ingest), 401
   for none or a wrong one. A read wants the read token when one is set (the admin token reads too):
   everything but /healthz and the /docs page with its Swagger UI files (they hold nothing of this
   collector; the page asks for the token, api/docs.py), so /metrics (active stragglers' job ids and
   nodes) and /openapi.json as well.
2. NUL bytes. None may appear in the path or the query string (PostgreSQL text cannot hold one): 422.
3. The body. At most `max_body_bytes` (413), on the declared length before anything is read, and
   again while it streams; it is read here, whole, and handed on.
So a request without the right token costs no body read, no JSON parsing and no query.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from urllib.parse import unquote_to_bytes

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpuscope.collector.api.state import CollectorState, collector_state
from gpuscope.collector.ingest.body_rules import is_ingest

MAX_BODY_BYTES = 64 * 2**10  # silences are well under a kilobyte; nothing outside ingest needs more
OPEN_PATHS = frozenset({"/healthz", "/docs"})
OPEN_PREFIXES = ("/docs-assets/",)
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
ADMIN_OFF = "not found: changes through the API are switched off (start the collector with --admin-token-file)"


class Refusal(Exception):
    def __init__(self, status: int, detail: str, headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = list(headers)


BEARER = ((b"www-authenticate", b"Bearer"),)


class RequestGuard:
    def __init__(self, app: ASGIApp, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_ingest(scope):
            await self.app(scope, receive, send)
            return
        try:
            check_token(collector_state(scope["app"]), scope)
            check_no_nul(scope)
            receive = await self._read_body(scope, receive)
        except Refusal as refusal:
            # A body left unread (or cut off) must not be taken for the next request: close after the answer.
            await _answer(send, refusal, close=_declares_body(scope))
            return
        await self.app(scope, receive, send)

    async def _read_body(self, scope: Scope, receive: Receive) -> Receive:
        """The whole body (at most the cap), read now and replayed to the app; a request that declares
        no body (GET, as clients send it) is passed through untouched."""
        if not _declares_body(scope):
            return receive
        declared = _header(scope, b"content-length")
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                raise Refusal(400, "Content-Length is not a number") from None
            if length > self.max_body_bytes:
                raise Refusal(413, self._too_large(length))
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return _replay([message])
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise Refusal(413, self._too_large(None))
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return _replay([{"type": "http.request", "body": b"".join(chunks), "more_body": False}], receive)

    def _too_large(self, length: int | None) -> str:
        told = f" ({length} bytes)" if length is not None else ""
        return f"request body too large{told}: at most {self.max_body_bytes} bytes outside the ingest route"


def check_token(state: CollectorState, scope: Scope) -> None:
    authorization = _header(scope, b"authorization")
    if scope["method"] not in READ_METHODS:
        if state.admin_auth is None:
            raise Refusal(404, ADMIN_OFF)
        if state.admin_auth.verify(authorization):
            return
        if _valid_elsewhere(state, authorization, read=True):
            raise Refusal(403, "this token may not change anything: changes want the admin token")
        raise Refusal(401, "missing or invalid admin bearer token", BEARER)
    if state.read_auth is None or _open(scope["path"]):
        return
    if state.read_auth.verify(authorization) or (
        state.admin_auth is not None and state.admin_auth.verify(authorization)
    ):
        return
    if _valid_elsewhere(state, authorization, read=False):
        raise Refusal(403, "this token may not read: reads want the read token")
    raise Refusal(401, "missing or invalid bearer token", BEARER)


def _open(path: str) -> bool:
    """A path every reader may have: no `..` in it, so it cannot climb out of the open ones."""
    return path in OPEN_PATHS or (path.startswith(OPEN_PREFIXES) and ".." not in path)


def _valid_elsewhere(state: CollectorState, authorization: str | None, read: bool) -> bool:
    """A token of ours that is not for this: an ingest (or per-node) token, or (for a change) the read token."""
    if state.ingest.auth.verify(authorization):
        return True
    return read and state.read_auth is not None and state.read_auth.verify(authorization)


def check_no_nul(scope: Scope) -> None:
    query = scope.get("query_string", b"")
    if "\x00" in scope["path"] or b"\x00" in unquote_to_bytes(query.replace(b"+", b" ")):
        raise Refusal(422, "the URL holds a NUL byte (%00): no path segment or query parameter may contain one")


def _declares_body(scope: Scope) -> bool:
    return any(key in (b"content-length", b"transfer-encoding") for key, _ in scope["headers"])


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _replay(messages: list[Message], then: Receive | None = None) -> Receive:
    """A receive() that hands out `messages`, then defers to `then` (which reports the disconnect)."""
    pending = list(messages)

    async def receive() -> Message:
        if pending:
            return pending.pop(0)
        if then is None:
            return {"type": "http.disconnect"}
        return await then()

    return receive


async def _answer(send: Send, refusal: Refusal, close: bool) -> None:
    body = json.dumps({"detail": refusal.detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers + refusal.headers})
    await send({"type": "http.response.body", "body": body})
