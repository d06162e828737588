"""Serves the Dash app: in a background thread (demo, tests) or in the foreground (`gpuscope dashboard`)."""

from __future__ import annotations

import threading

from dash import Dash
from werkzeug.serving import BaseWSGIServer, make_server

# The dashboard has no login yet: by default it is reachable from this host only.
DEFAULT_LISTEN = "127.0.0.1:8050"


class DashboardServer:
    def __init__(self, app: Dash, host: str, port: int) -> None:
        self._server: BaseWSGIServer = make_server(host, port, app.server, threaded=True)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, name="dashboard", daemon=True)
        self._thread.start()

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)
