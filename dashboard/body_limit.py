"""A cap on request bodies, enforced before a body is read. The only bodies the dashboard takes are
Dash's callback requests (POST /_dash-update-component: a few kilobytes of component state); the login
is basic auth, in a header. Without a cap, any client could make a worker read and parse gigabytes.

Not Flask's MAX_CONTENT_LENGTH: werkzeug's stream stops at that cap without saying so, so a longer
chunked body (no Content-Length) reached Dash cut short and got a 400 for broken JSON, not a 413."""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import IO, Any

from flask import Flask, Response
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.wsgi import get_content_length


def limit_bodies(server: Flask, max_bytes: int) -> None:
    """413 for a body over `max_bytes`: a declared one before the app (and its login) runs at all, a
    chunked one as soon as reading it passes the cap."""
    app = server.wsgi_app

    def capped(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        declared = get_content_length(environ)  # None when absent, chunked, or not a number
        if declared is not None and declared > max_bytes:
            return too_large(max_bytes)(environ, start_response)
        if declared is None:
            # werkzeug reads a body without a length only where the server ends it (chunked input):
            # counted here, whoever reads it.
            environ["wsgi.input"] = CappedInput(environ["wsgi.input"], max_bytes)
        return app(environ, start_response)

    server.wsgi_app = capped  # type: ignore[method-assign]
    server.register_error_handler(RequestEntityTooLarge, lambda _: too_large(max_bytes))


def too_large(max_bytes: int) -> Response:
    text = f"Request body too large: the dashboard accepts at most {max_bytes} bytes (max_body_bytes).\n"
    return Response(text, 413, {"Content-Type": "text/plain; charset=utf-8"})


class CappedInput(io.RawIOBase):
    """`stream`, which raises RequestEntityTooLarge once more than `max_bytes` have come out of it."""

    def __init__(self, stream: IO[bytes], max_bytes: int) -> None:
        self._stream = stream
        self._left = max_bytes

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        # One byte past the cap is asked for, so that a body of exactly max_bytes still passes.
        data = self._stream.read(min(len(buffer), self._left + 1))
        self._left -= len(data)
        if self._left < 0:
            raise RequestEntityTooLarge()
        buffer[: len(data)] = data
        return len(data)
