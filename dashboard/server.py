"""Serves the Dash app: with gunicorn in the foreground (`gpuscope dashboard`), or with werkzeug in a
background thread of the demo's or a test's own process."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from dash import Dash
from werkzeug.serving import BaseWSGIServer, make_server

# The dashboard has no login yet: by default it is reachable from this host only.
DEFAULT_LISTEN = "127.0.0.1:8050"

# Each worker process serves this many requests at once. A page fires several callbacks together and
# each mostly waits on the database, so threads overlap those waits (gthread); processes (--workers)
# add CPU for building figures, which holds the GIL. Four matches each worker's read pool.
THREADS_PER_WORKER = 4
# SIGTERM lets requests in flight finish for this long; SIGINT stops at once.
GRACEFUL_STOP_S = 5


class DashboardServer:
    """werkzeug in a thread, for the demo and tests: one process, started and stopped by its owner."""

    def __init__(self, app: Dash, host: str, port: int) -> None:
        self._server: BaseWSGIServer = make_server(host, port, app.server, threaded=True)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, name="dashboard", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)


def serve_with_gunicorn(
    load_app: Callable[[], Any],
    host: str,
    port: int,
    workers: int,
    on_ready: Callable[[int], None],
    on_worker_exit: Callable[[], None],
) -> None:
    """Serve the WSGI app `load_app()` makes until SIGINT or SIGTERM (then exit status 0).

    `load_app` runs in each worker process after the fork, so every worker opens its own database pool
    (a pool's threads and connections do not survive a fork); `on_worker_exit` runs there as it stops.
    `on_ready` gets the port once the master listens (the one asked for, or the one given for port 0).
    """
    # Imported here: the demo and the tests serve through werkzeug and need not have gunicorn installed.
    from gunicorn.app.base import BaseApplication

    settings: dict[str, Any] = {
        "bind": [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"],
        "workers": workers,
        "worker_class": "gthread",
        "threads": THREADS_PER_WORKER,
        "graceful_timeout": GRACEFUL_STOP_S,
        # Workers' heartbeat files: in memory, since the root file system may be read-only (Kubernetes).
        "worker_tmp_dir": "/dev/shm" if os.access("/dev/shm", os.W_OK) else None,  # noqa: S108
        # gunicorn >= 25.1 opens a control socket at one path per user: a second dashboard would take it.
        "control_socket_disable": True,
        "when_ready": lambda arbiter: on_ready(int(arbiter.LISTENERS[0].sock.getsockname()[1])),
        "worker_exit": lambda _arbiter, _worker: on_worker_exit(),
    }

    class Dashboard(BaseApplication):
        def load_config(self) -> None:
            for name, value in settings.items():
                if name in self.cfg.settings:  # settings newer than the installed gunicorn are left out
                    self.cfg.set(name, value)

        def load(self) -> Any:
            return load_app()

    Dashboard().run()
