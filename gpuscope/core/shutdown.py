"""A deadline on shutdown: a service asked to stop is gone within a bound, whatever it was waiting on.

A clean stop can hang on things no timeout reaches: a worker thread inside a blocking database call, a
connection to a server that no longer answers. Kubernetes sends SIGKILL 30 s after SIGTERM, and an
operator's Ctrl-C deserves better. Past the deadline the process runs its last words (stop what must
not outlive it) and exits; what it had acknowledged is already committed, so nothing accepted is lost.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

STOP_DEADLINE_S = 7.5  # of a 10 s promise: leaves the last words time to run


class ShutdownDeadline:
    def __init__(self, last_words: Callable[[], None] = lambda: None, seconds: float = STOP_DEADLINE_S) -> None:
        self._last_words = last_words
        self._seconds = seconds
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def arm(self) -> None:
        """The stop has begun (idempotent): the clock runs from the first call."""
        with self._lock:
            if self._timer is None:
                self._timer = threading.Timer(self._seconds, self._expire)
                self._timer.daemon = True
                self._timer.start()

    def disarm(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()

    def _expire(self) -> None:
        log.error(
            "shutdown still not finished after %.1f s: exiting now (everything acknowledged is stored)", self._seconds
        )
        try:
            self._last_words()
        finally:
            logging.shutdown()
            os._exit(0)
