"""Serves a collector app with uvicorn: in the foreground (production), or in a thread (demo and tests)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from types import FrameType

import uvicorn
from starlette.types import ASGIApp

# On SIGTERM, requests in flight get this long to finish; the rest of the stop is bounded by the caller's
# ShutdownDeadline (gpuscope/core/shutdown.py), armed by the same signal.
GRACE_S = 3


def serve(
    app: ASGIApp,
    host: str,
    port: int,
    sockets: list[socket.socket] | None = None,
    on_stop_signal: Callable[[], None] = lambda: None,
) -> None:
    """Until SIGINT/SIGTERM; `sockets`: already bound ones (SO_REUSEPORT workers, collector/workers.py)."""
    config = uvicorn.Config(
        app, host=host, port=port, log_level="info", access_log=False, timeout_graceful_shutdown=GRACE_S
    )
    _Server(config, on_stop_signal).run(sockets=sockets)


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, on_stop_signal: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_stop_signal = on_stop_signal

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        self._on_stop_signal()


class BackgroundServer:
    """Uvicorn in a thread, for the demo and tests: start() returns once it accepts connections."""

    def __init__(self, app: ASGIApp, host: str, port: int) -> None:
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="uvicorn", daemon=True)

    @property
    def port(self) -> int:
        sockets = self._server.servers[0].sockets
        return int(sockets[0].getsockname()[1])

    def start(self, timeout: float = 60.0) -> None:
        self._thread.start()  # uvicorn installs no signal handlers outside the main thread
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("collector failed to start (see the log above)")
            if time.monotonic() > deadline:
                raise RuntimeError(f"collector did not start within {timeout:.0f}s")
            time.sleep(0.05)

    def stop(self, timeout: float = 15.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)
