"""A page's contents loaded while a first visit's browser compiles the page's scripts (most of a second on
a cold cache, before it asks for the page's layout): the load starts when a browser asks for the page's
HTML, and the layout takes the result if it is fresh, once. One load at a time per process, so a stream
of page requests costs no more than one refreshing page."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import flask

FRESH_S = 3.0  # older contents are loaded again: the page's timer would refresh them a few seconds later


@dataclass
class _Load:
    key: str
    started: float
    result: Future[Any] = field(default_factory=Future)


class Prefetch:
    """Loads of `load(key)` in a thread of their own; `take(key)` hands a fresh one's result over once."""

    def __init__(
        self, load: Callable[[str], Any], fresh_s: float = FRESH_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._load = load
        self._fresh_s = fresh_s
        self._clock = clock
        self._lock = threading.Lock()  # start() and take() each see and change `_current` whole
        self._current: _Load | None = None
        self.loads_started = 0

    def start(self, key: str) -> bool:
        """Start loading `key`'s contents, unless a load is still running (False)."""
        with self._lock:
            if self._current is not None and not self._current.result.done():
                return False
            current = self._current = _Load(key, self._clock())
            self.loads_started += 1
        threading.Thread(target=self._run, args=(current,), name="page-prefetch", daemon=True).start()
        return True

    def take(self, key: str) -> Any | None:
        """The contents of `key` loaded from at most `fresh_s` ago (waiting for a load still running), or
        None: none started, another key's, too old, or already taken. A load that raised raises here."""
        with self._lock:
            current = self._current
            if current is None or current.key != key or self._clock() - current.started > self._fresh_s:
                return None
            self._current = None
        return current.result.result()

    def _run(self, load: _Load) -> None:
        try:
            load.result.set_result(self._load(load.key))
        except BaseException as exc:  # handed to take(), which raises it where the load would have
            load.result.set_exception(exc)


def navigating(request: flask.Request) -> bool:
    """Whether a browser is opening a page: Sec-Fetch-Dest says "document" where browsers send it, else the
    request names text/html. A readiness probe's or a script's `Accept: */*` is no visit to prepare for."""
    destination = request.headers.get("Sec-Fetch-Dest")
    if destination is not None:
        return destination == "document"
    return "text/html" in request.headers.get("Accept", "")


def install(server: flask.Flask, name: str, prefetch: Prefetch, key_of: Callable[[flask.Request], str | None]) -> None:
    """Start `prefetch` for the key `key_of` gives a page visit (None: not this page, or nothing to load
    ahead). Install it after any login check: Flask stops at the first before_request hook that answers,
    so a request refused there starts nothing."""
    server.extensions[name] = prefetch

    @server.before_request
    def prefetch_page() -> None:
        if flask.request.method != "GET" or not navigating(flask.request):
            return
        key = key_of(flask.request)
        if key is not None:
            prefetch.start(key)


def taken(name: str, key: str) -> Any | None:
    """Prefetch.take(key) of the prefetch installed as `name` in the app serving this request; None outside
    a request or where none is installed."""
    if not flask.has_app_context():
        return None
    prefetch = flask.current_app.extensions.get(name)
    return prefetch.take(key) if isinstance(prefetch, Prefetch) else None
