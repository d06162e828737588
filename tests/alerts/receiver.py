"""A local HTTP server that plays a chat service: it records what it is sent and answers from a script
(e.g. 500 then 200, or 429 with Retry-After), so delivery is tested against real HTTP."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.waiting import eventually


@dataclass(frozen=True)
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: str = "ok"
    delay_s: float = 0.0  # a slow service: the request is recorded on arrival, answered this much later


@dataclass(frozen=True)
class Received:
    path: str
    body: Any
    at: float  # time.monotonic()
    content_type: str


class ChatReceiver:
    """Answers each path from its script in order, repeating the last reply; records every request."""

    def __init__(self) -> None:
        self.scripts: dict[str, list[Reply]] = defaultdict(lambda: [Reply()])
        self.received: list[Received] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver._lock:
                    receiver.received.append(
                        Received(self.path, json.loads(raw), time.monotonic(), self.headers.get("Content-Type", ""))
                    )
                    script = receiver.scripts[self.path]
                    reply = script.pop(0) if len(script) > 1 else script[0]
                time.sleep(reply.delay_s)
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                payload = reply.body.encode()
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def script(self, path: str, *replies: Reply) -> str:
        self.scripts[path] = list(replies)
        return self.url + path

    def at(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.path == path]

    def wait_for(self, path: str, count: int, timeout: float = 20.0) -> list[Received]:
        """What `path` received, once that is at least `count` requests; fails after `timeout` seconds."""

        def enough() -> list[Received]:
            received = self.at(path)
            assert len(received) >= count, f"{len(received)} so far"
            return received

        return eventually(enough, timeout=timeout, interval=0.02, what=f"{count} request(s) to {path}")

    def __enter__(self) -> ChatReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
