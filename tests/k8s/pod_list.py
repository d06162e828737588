"""A loopback HTTP server answering GET /pods with a v1 PodList, as the kubelet's read-only port does.

The exporter reads pod labels from it to group pods into jobs; the test scripts the pods and their labels.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def pod(
    name: str,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    owner: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """A pod of a PodList, with only the metadata the exporter reads."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"}
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    if owner:
        metadata["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    return {"metadata": metadata, "spec": {"nodeName": "node-a"}, "status": {"phase": "Running"}}


class PodListServer:
    def __init__(self) -> None:
        self._body = b'{"kind":"PodList","apiVersion":"v1","items":[]}'
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.requests += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(server._body)))
                self.end_headers()
                self.wfile.write(server._body)

            def log_message(self, *_: object) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}/pods"

    def set_pods(self, pods: list[dict[str, Any]]) -> None:
        self._body = json.dumps({"kind": "PodList", "apiVersion": "v1", "items": pods}).encode()


@contextmanager
def pod_list_server() -> Iterator[PodListServer]:
    server = PodListServer()
    thread = threading.Thread(target=server._http.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server._http.shutdown()
        server._http.server_close()
        thread.join(timeout=5)
