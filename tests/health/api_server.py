"""A stand-in for the Kubernetes API server's node endpoints, on 127.0.0.1, for the health loop's
Kubernetes adapter (no API server runs here). It speaks what the official client sends and expects:
GET /api/v1/nodes and /api/v1/nodes/NAME, PATCH of a node and of its status as a strategic merge patch
(maps merge, null deletes, conditions merge by type, other lists replace), and 404 and 403 as Status
objects. It records every request, so a test sees what the adapter asked."""

from __future__ import annotations

import contextlib
import copy
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MERGE_BY_KEY = {"conditions": "type"}  # Kubernetes' patchMergeKey for the lists the adapter patches


def node(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": {}, "labels": {}},
            "spec": dict(spec), "status": {"conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip


def merge(target: Any, patch: Any, field: str = "") -> Any:
    if isinstance(patch, dict) and isinstance(target, dict):
        out = dict(target)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = merge(out.get(key), value, key)
        return out
    if isinstance(patch, list) and field in MERGE_BY_KEY and isinstance(target, list):
        key = MERGE_BY_KEY[field]
        out = [dict(item) for item in target]
        for item in patch:
            same = [i for i, existing in enumerate(out) if existing.get(key) == item.get(key)]
            if same:
                out[same[0]] = merge(out[same[0]], item)
            else:
                out.append(item)
        return out
    return copy.deepcopy(patch)


class ApiServer(ThreadingHTTPServer):
    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.requests: list[tuple[str, str, Any]] = []
        self.forbid_patches = False
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: ApiServer

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.requests.append(("GET", self.path, None))
            if self.path.split("?")[0] == "/api/v1/nodes":
                self._send(200, {"apiVersion": "v1", "kind": "NodeList", "metadata": {},
                                 "items": list(self.server.nodes.values())})  # fmt: skip
                return
            name = self.path.split("?")[0].removeprefix("/api/v1/nodes/")
            found = self.server.nodes.get(name)
            self._send(200, found) if found else self._status(404, "NotFound", f'nodes "{name}" not found')

    def do_PATCH(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.requests.append(("PATCH", self.path, (self.headers["Content-Type"], body)))
            name = self.path.removeprefix("/api/v1/nodes/").removesuffix("/status")
            if self.server.forbid_patches:
                self._status(403, "Forbidden", f'nodes "{name}" is forbidden: cannot patch resource "nodes"')
                return
            if name not in self.server.nodes:
                self._status(404, "NotFound", f'nodes "{name}" not found')
                return
            if not self.headers["Content-Type"].startswith("application/strategic-merge-patch+json"):
                self._status(415, "UnsupportedMediaType", "this stand-in takes strategic merge patches")
                return
            if self.path.endswith("/status"):
                body = {"status": body.get("status", {})}  # the status subresource changes status only
            else:
                body.pop("status", None)
            self.server.nodes[name] = merge(self.server.nodes[name], body)
            self._send(200, self.server.nodes[name])

    def _status(self, code: int, reason: str, message: str) -> None:
        self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                          "reason": reason, "code": code})  # fmt: skip

    def _send(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def api_server(nodes: list[dict[str, Any]]) -> Iterator[ApiServer]:
    server = ApiServer(nodes)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
