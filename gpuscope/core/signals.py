"""How every long-running gpuscope command learns it should stop."""

from __future__ import annotations

import signal
import threading
from types import FrameType


def stop_on_signals() -> threading.Event:
    """An event set by the first SIGINT or SIGTERM; a second Ctrl-C falls back to Python's default
    (KeyboardInterrupt), for when a clean shutdown is itself stuck."""
    stop = threading.Event()

    def handler(signum: int, _frame: FrameType | None) -> None:
        stop.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return stop
