"""The labels, annotations and owner of this node's pods, which group pods into jobs (workloads.py).

Two sources answer the same v1 PodList JSON:
- KubeletPods: the kubelet's read-only port (http://127.0.0.1:10255/pods), off on many clusters;
- ApiServerPods: GET /api/v1/pods?fieldSelector=spec.nodeName=<node> with the pod's ServiceAccount token,
  which needs get/list on pods. The token is projected and rotates, so it (and the CA) is re-read on
  each fetch; the token never appears in a message.
Standard library only: http.client and ssl. A fetch gets `timeout` seconds for the whole exchange (each
socket wait gets what is left of it) and at most `max_bytes` of body; every failure is a PodListError
whose message is one line, fit for a log.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import SplitResult, quote, urlsplit

MAX_BODY = 64 * 1024 * 1024
SECRETS = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_RBAC_HINT = "the exporter's ServiceAccount needs get and list on pods (check its token and ClusterRoleBinding)"


@dataclass(frozen=True)
class PodMeta:
    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    owner_kind: str | None  # of the ownerReference with controller: true
    owner_name: str | None


class PodListError(Exception):
    """A pod list could not be fetched or read; the message is one line."""


def parse_pod_list(body: bytes) -> dict[tuple[str, str], PodMeta]:
    """(namespace, name) -> PodMeta for each well-formed item of a v1 PodList."""
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PodListError(f"not JSON: {_one_line(exc)}") from None
    if not isinstance(doc, dict) or doc.get("kind") != "PodList":
        kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
        raise PodListError(f"not a PodList (kind {_one_line(kind)})")
    items = doc.get("items")
    items = [] if items is None else items  # Go writes an empty slice as null
    if not isinstance(items, list):
        raise PodListError("not a PodList (items is not a list)")
    pods: dict[tuple[str, str], PodMeta] = {}
    for item in items:
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(meta, dict):
            continue
        namespace, name = meta.get("namespace"), meta.get("name")
        if not (isinstance(namespace, str) and namespace and isinstance(name, str) and name):
            continue
        owner = _controller(meta.get("ownerReferences"))
        uid = meta.get("uid")
        pods[namespace, name] = PodMeta(
            namespace=namespace,
            name=name,
            uid=uid if isinstance(uid, str) else "",
            labels=_strings(meta.get("labels")),
            annotations=_strings(meta.get("annotations")),
            owner_kind=owner[0] if owner else None,
            owner_name=owner[1] if owner else None,
        )
    return pods


def _strings(value: Any) -> Mapping[str, str]:
    if not isinstance(value, dict):
        return MappingProxyType({})
    return MappingProxyType({k: v for k, v in value.items() if isinstance(v, str)})


def _controller(refs: Any) -> tuple[str, str] | None:
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, dict) and ref.get("controller") is True:
            kind, name = ref.get("kind"), ref.get("name")
            if isinstance(kind, str) and kind and isinstance(name, str) and name:
                return kind, name
    return None


class KubeletPods:
    def __init__(
        self, url: str = "http://127.0.0.1:10255/pods", timeout: float = 2.0, *, max_bytes: int = MAX_BODY
    ) -> None:
        _check_url(url)
        self.url = url
        self.timeout = timeout
        self.max_bytes = max_bytes

    def describe(self) -> str:
        return f"kubelet {self.url}"

    def fetch(self) -> dict[tuple[str, str], PodMeta]:
        body = _get(self.describe(), self.url, {}, None, self.timeout, self.max_bytes, auth_hint=None)
        return _parse(self.describe(), body)


class ApiServerPods:
    def __init__(
        self,
        node: str,
        server: str,
        token_file: Path,
        ca_file: Path | None,
        timeout: float = 5.0,
        *,
        max_bytes: int = MAX_BODY,
    ) -> None:
        if not node:
            raise ValueError("ApiServerPods needs the node's name")
        server = server.rstrip("/")
        parts = _check_url(server)
        if parts.scheme == "http" and not _is_loopback(parts.hostname or ""):
            raise ValueError(f"refusing plain http to the API server {server}: the bearer token would go in clear")
        self.node = node
        self.server = server
        self.token_file = token_file
        self.ca_file = ca_file
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.url = f"{server}/api/v1/pods?fieldSelector=" + quote(f"spec.nodeName={node}", safe="")

    @classmethod
    def in_cluster(
        cls, node: str, env: Mapping[str, str] = os.environ, secrets: Path = SECRETS
    ) -> ApiServerPods | None:
        """The API server as a pod sees it, or None outside a cluster (no service env vars or token)."""
        host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
        token_file, ca_file = secrets / "token", secrets / "ca.crt"
        if not host or not port or not token_file.is_file():
            return None
        host = f"[{host}]" if ":" in host else host
        return cls(node, f"https://{host}:{port}", token_file, ca_file if ca_file.is_file() else None)

    def describe(self) -> str:
        return f"API server {self.server} (pods on node {self.node})"

    def fetch(self) -> dict[tuple[str, str], PodMeta]:
        headers = {"Authorization": f"Bearer {self._token()}"}
        context = None
        if self.url.startswith("https:"):
            try:
                context = ssl.create_default_context(cafile=self.ca_file)
            except (OSError, ValueError) as exc:
                raise PodListError(f"{self.describe()}: cannot load the CA {self.ca_file}: {_one_line(exc)}") from None
        body = _get(self.describe(), self.url, headers, context, self.timeout, self.max_bytes, auth_hint=_RBAC_HINT)
        return _parse(self.describe(), body)

    def _token(self) -> str:
        try:
            token = self.token_file.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not ASCII"
            raise PodListError(f"{self.describe()}: cannot read the token file {self.token_file}: {reason}") from None
        # http.client would put a bad header value in its error: check it here, without quoting it.
        if not token or not all("!" <= c <= "~" for c in token):
            raise PodListError(f"{self.describe()}: the token file {self.token_file} holds no valid token")
        return token


def _check_url(url: str) -> SplitResult:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    parts.port  # noqa: B018  (raises ValueError for a bad port)
    return parts


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _parse(source: str, body: bytes) -> dict[tuple[str, str], PodMeta]:
    try:
        return parse_pod_list(body)
    except PodListError as exc:
        raise PodListError(f"{source}: {exc}") from None


def _get(
    source: str,
    url: str,
    headers: dict[str, str],
    context: ssl.SSLContext | None,
    timeout: float,
    max_bytes: int,
    auth_hint: str | None,
) -> bytes:
    """The body of a 200 answer to GET url, within `timeout` seconds and `max_bytes`; `auth_hint` follows
    a 401 or 403."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(host, parts.port or 443, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection(host, parts.port or 80, timeout=timeout)
    deadline = time.monotonic() + timeout
    try:
        conn.connect()
        sock = conn.sock  # kept: conn drops it once the answer says the connection will close

        def left() -> float:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            sock.settimeout(remaining)
            return remaining

        left()
        conn.request("GET", target, headers={"Accept": "application/json", "User-Agent": "gpuscope", **headers})
        resp = conn.getresponse()
        if resp.status != 200:
            raise PodListError(f"{source}: {_status(resp, left, auth_hint)}")
        if resp.length is not None and resp.length > max_bytes:
            raise PodListError(f"{source}: answer of {resp.length} bytes is over the limit of {max_bytes}")
        chunks: list[bytes] = []
        size = 0
        while left() and (chunk := resp.read1(1 << 16)):
            size += len(chunk)
            if size > max_bytes:
                raise PodListError(f"{source}: answer is over the limit of {max_bytes} bytes")
            chunks.append(chunk)
        if resp.length:
            raise PodListError(f"{source}: answer cut short ({resp.length} bytes missing)")
        return b"".join(chunks)
    except TimeoutError:
        raise PodListError(f"{source}: no complete answer within {timeout:g} s") from None
    except ssl.SSLError as exc:
        raise PodListError(f"{source}: TLS failed: {_one_line(exc)}") from None
    except OSError as exc:
        raise PodListError(f"{source}: cannot connect: {_one_line(exc)}") from None
    except http.client.HTTPException as exc:
        raise PodListError(f"{source}: bad HTTP answer: {type(exc).__name__} {_one_line(exc)}") from None
    finally:
        conn.close()


def _status(resp: http.client.HTTPResponse, left: Callable[[], float], auth_hint: str | None) -> str:
    """'HTTP 403 Forbidden: <the API server's Status message>; <hint>' for an answer that is not 200."""
    text = f"HTTP {resp.status} {resp.reason}"
    try:
        left()
        status = json.loads(resp.read1(4096))
        if isinstance(status, dict) and isinstance(status.get("message"), str):
            text += f": {_one_line(status['message'])}"
    except (OSError, ValueError, http.client.HTTPException):
        pass  # the status line says enough
    if auth_hint and resp.status in (401, 403):
        text += f"; {auth_hint}"
    return text


def _one_line(value: object, limit: int = 300) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
