"""The exporter's HTTP endpoint: GET /metrics and GET /healthz, from the latest snapshot only."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from gpuscope.core.listen import parse_listen
from gpuscope.exporter.exposition import Exposition

# Health is the age of the newest snapshot: stale means the sampling loop is stuck.
Health = Callable[[], tuple[bool, dict[str, object]]]


def make_server(listen: str, exposition: Exposition, health: Health) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        server_version = "gpuscope-exporter"
        protocol_version = "HTTP/1.1"  # keep-alive: Prometheus reuses its connection between scrapes

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                body, content_type = exposition.render(self.headers.get("Accept"))
                self._send(200, content_type, body)
            elif path == "/healthz":
                ok, detail = health()
                self._send(200 if ok else 503, "application/json", json.dumps(detail).encode())
            else:
                self._send(404, "text/plain; charset=utf-8", b"not found: try /metrics or /healthz\n")

        def _send(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # a scrape every few seconds is not worth a log line

    host, port = parse_listen(listen)
    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def snapshot_health(latest_ts: Callable[[], float | None], interval: float) -> Health:
    def health() -> tuple[bool, dict[str, object]]:
        ts = latest_ts()
        if ts is None:
            return False, {"status": "starting"}
        age = time.time() - ts
        ok = age <= max(3 * interval, 10.0)
        return ok, {"status": "ok" if ok else "stale", "snapshot_age_seconds": round(age, 3)}

    return health


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="exporter-http", daemon=True)
    thread.start()
    return thread
