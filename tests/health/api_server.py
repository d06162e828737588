"""A stand-in for the Kubernetes API server's node endpoints, on 127.0.0.1, for the health loop's
Kubernetes adapter (no API server runs here). It speaks what the official client sends and expects:
GET /api/v1/nodes and /api/v1/nodes/NAME, PATCH of a node and of its status as a strategic merge patch
(maps merge, null deletes, conditions merge by type, other lists replace), and 404 and 403 as Status
objects. It records every request, so a test sees what the adapter asked.

For Dynamic Resource Allocation it serves resource.k8s.io as the real server does for what the adapter
uses: discovery (/apis/resource.k8s.io and each version's resource list), ResourceSlices (list, with the
fieldSelector spec.nodeName=... the real server supports for them) and DeviceTaintRules (create, with 409
on a name in use; get, delete, 404 when missing; list, with an equality labelSelector). `dra_versions`
says which version serves each; empty, the group is not served (404), as on a cluster without DRA."""

from __future__ import annotations

import contextlib
import copy
import json
import threading
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

MERGE_BY_KEY = {"conditions": "type"}  # Kubernetes' patchMergeKey for the lists the adapter patches
DRA = "resource.k8s.io"
DRA_KINDS = {"resourceslices": "ResourceSlice", "devicetaintrules": "DeviceTaintRule"}
VERSION_PREFERENCE = ["v1", "v1beta2", "v1beta1", "v1alpha3"]  # the order the real server lists them in


def node(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": {}, "labels": {}},
            "spec": dict(spec), "status": {"conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip


def gpu_device(name: str, uuid: str, index: int | None = None, basic: bool = False) -> dict[str, Any]:
    """A whole GPU as NVIDIA's DRA driver publishes it; `basic`: in resource.k8s.io/v1beta1's shape."""
    attributes: dict[str, Any] = {"type": {"string": "gpu"}, "uuid": {"string": uuid},
                                  "productName": {"string": "NVIDIA H100 80GB HBM3"}}  # fmt: skip
    if index is not None:
        attributes["index"] = {"int": index}
    return {"name": name, "basic": {"attributes": attributes}} if basic else {"name": name, "attributes": attributes}


def resource_slice(node: str, devices: list[dict[str, Any]], driver: str = "gpu.nvidia.com") -> dict[str, Any]:
    """One driver's devices on one node (its pool named after the node, as NVIDIA's driver does)."""
    pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
    return {"kind": "ResourceSlice", "metadata": {"name": f"{node}-{driver}-x7k2p"},
            "spec": {"driver": driver, "nodeName": node, "pool": pool, "devices": devices}}  # fmt: skip


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
    def __init__(self, nodes: list[dict[str, Any]], slices: Iterable[dict[str, Any]] = ()) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.slices = list(slices)
        self.taint_rules: dict[str, dict[str, Any]] = {}
        self.dra_versions = {"resourceslices": "v1", "devicetaintrules": "v1"}  # plural -> version; {}: no DRA
        self.forbidden: set[str] = set()  # DRA resources every request to which is refused (403)
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
            if self.path.startswith("/apis/"):
                self._dra("GET", None)
                return
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

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.requests.append(("POST", self.path, body))
            self._dra("POST", body)

    def do_DELETE(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        with self.server.lock:
            self.server.requests.append(("DELETE", self.path, body))
            self._dra("DELETE", body)

    def _dra(self, method: str, body: Any) -> None:
        path, _, query = self.path.partition("?")
        parts = path.strip("/").split("/")  # apis, group[, version[, plural[, name]]]
        served = self.server.dra_versions
        versions = [v for v in VERSION_PREFERENCE if v in served.values()]
        if parts[:2] != ["apis", DRA] or not versions:
            self._status(404, "NotFound", "the server could not find the requested resource")
        elif len(parts) == 2:
            entries = [{"groupVersion": f"{DRA}/{v}", "version": v} for v in versions]
            self._send(200, {"kind": "APIGroup", "apiVersion": "v1", "name": DRA, "versions": entries,
                             "preferredVersion": entries[0]})  # fmt: skip
        elif parts[2] not in versions or (len(parts) > 3 and served.get(parts[3]) != parts[2]):
            self._status(404, "NotFound", "the server could not find the requested resource")
        elif len(parts) == 3:
            resources = [{"name": plural, "singularName": "", "namespaced": False, "kind": DRA_KINDS[plural],
                          "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}
                         for plural, version in served.items() if version == parts[2]]  # fmt: skip
            self._send(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{DRA}/{parts[2]}",
                             "resources": resources})  # fmt: skip
        elif parts[3] in self.server.forbidden:
            self._status(403, "Forbidden", f'{parts[3]}.{DRA} is forbidden: User "system:serviceaccount:'
                         f'gpuscope:gpuscope-collector" cannot {method.lower()} resource "{parts[3]}"')  # fmt: skip
        else:
            self._dra_object(method, parts[2], parts[3], parts[4] if len(parts) > 4 else None, parse_qs(query), body)

    def _dra_object(self, method: str, version: str, plural: str, name: str | None, query: dict[str, list[str]],
                    body: Any) -> None:  # fmt: skip
        kind = DRA_KINDS[plural]
        if method == "GET" and name is None:
            items = self.server.slices if plural == "resourceslices" else list(self.server.taint_rules.values())
            try:
                items = _selected(items, query)
            except ValueError as exc:
                self._status(400, "BadRequest", str(exc))
                return
            self._send(200, {"kind": f"{kind}List", "apiVersion": f"{DRA}/{version}", "metadata": {}, "items": items})
        elif plural == "resourceslices":
            self._status(405, "MethodNotAllowed", "this stand-in only lists ResourceSlices")
        elif method == "POST":
            self._create_rule(version, body)
        elif name not in self.server.taint_rules:
            self._status(404, "NotFound", f'{plural}.{DRA} "{name}" not found')
        elif method == "GET":
            self._send(200, self.server.taint_rules[name])
        else:
            self._send(200, self.server.taint_rules.pop(name))

    def _create_rule(self, version: str, body: dict[str, Any]) -> None:
        name = body.get("metadata", {}).get("name", "")
        taint = body.get("spec", {}).get("taint", {})
        if body.get("apiVersion") != f"{DRA}/{version}" or body.get("kind") != "DeviceTaintRule":
            self._status(400, "BadRequest", f"the body is not a {DRA}/{version} DeviceTaintRule")
        elif not name or not taint.get("key") or taint.get("effect") not in {"None", "NoSchedule", "NoExecute"}:
            self._status(422, "Invalid", f"DeviceTaintRule.{DRA} {name!r} is invalid: name, taint key or effect")
        elif name in self.server.taint_rules:
            self._status(409, "AlreadyExists", f'devicetaintrules.{DRA} "{name}" already exists')
        else:
            rule = copy.deepcopy(body)
            rule["metadata"].update(uid=f"uid-{len(self.server.requests)}", creationTimestamp="2026-01-01T00:00:00Z")
            rule["spec"]["taint"].setdefault("timeAdded", "2026-01-01T00:00:00Z")
            self.server.taint_rules[name] = rule
            self._send(201, rule)

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


def _selected(items: list[dict[str, Any]], query: dict[str, list[str]]) -> list[dict[str, Any]]:
    """The items the list's fieldSelector (spec.nodeName only, as for ResourceSlices) and labelSelector
    (equalities only) pick; another field is refused, as the real server refuses one it does not index."""
    picked = items
    for clause in filter(None, query.get("fieldSelector", [""])[0].split(",")):
        field, _, value = clause.partition("=")
        if field != "spec.nodeName":
            raise ValueError(f'field label not supported: "{field}"')
        picked = [i for i in picked if i.get("spec", {}).get("nodeName") == value]
    for clause in filter(None, query.get("labelSelector", [""])[0].split(",")):
        label, _, value = clause.partition("=")
        picked = [i for i in picked if (i["metadata"].get("labels") or {}).get(label) == value]
    return copy.deepcopy(picked)


@contextlib.contextmanager
def api_server(nodes: list[dict[str, Any]], slices: Iterable[dict[str, Any]] = ()) -> Iterator[ApiServer]:
    server = ApiServer(nodes, slices)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
