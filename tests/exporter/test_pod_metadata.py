"""Pod metadata from a real loopback HTTP(S) server answering PodList JSON as the kubelet and API server do."""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from gpuscope.core.listen import free_loopback_port
from gpuscope.exporter.jobs.pod_metadata import ApiServerPods, KubeletPods, PodListError, PodMeta, parse_pod_list
from tests.conftest import require_tool

TOKEN = "eyJhbGciOiJSUzI1NiJ9.secret-token-value"


def pod(namespace: str, name: str, **metadata: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, **metadata}, "spec": {}, "status": {}}


def pod_list(*items: Any) -> bytes:
    return json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": list(items)}).encode()


TRAINER = pod(
    "ml",
    "llama-node-0-0-abcde",
    uid="u-1",
    labels={"jobset.sigs.k8s.io/jobset-name": "llama", "replicas": 2},
    annotations={"note": "x"},
    ownerReferences=[
        {"kind": "Node", "name": "gpu-7"},
        {"kind": "Job", "name": "llama-node-0", "controller": True},
    ],
)


@dataclass
class Answer:
    status: int = 200
    body: bytes = pod_list(TRAINER)
    chunked: bool = False
    stall: str | None = None  # "head": say nothing; "body": the head, then a byte every 50 ms


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: PodServer

    def do_GET(self) -> None:
        server, answer = self.server, self.server.answer
        server.requests.append((self.path, dict(self.headers)))
        if answer.stall == "head":
            server.stopping.wait(10)
            return
        self.send_response(answer.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Connection", "close")
        if answer.stall == "body":
            self.send_header("Content-Length", "1000")
            self.end_headers()
            while not server.stopping.wait(0.05):
                self.wfile.write(b" ")
                self.wfile.flush()
        elif answer.chunked:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for at in range(0, len(answer.body), 1 << 16):
                chunk = answer.body[at : at + (1 << 16)]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class PodServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, cert: tuple[Path, Path] | None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answer = Answer()
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.stopping = threading.Event()
        if cert is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*cert)
            # the handshake happens in the request's thread, so a client that gives up cannot block accept()
            self.socket = context.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)
        self.base = f"{'https' if cert else 'http'}://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that hang up or reject the certificate, on purpose


@pytest.fixture
def serve() -> Iterator[Callable[..., PodServer]]:
    """Starts PodServers on 127.0.0.1 (plain, or TLS with a (cert, key)); all stopped afterwards."""
    started: list[tuple[PodServer, threading.Thread]] = []

    def start(cert: tuple[Path, Path] | None = None) -> PodServer:
        server = PodServer(cert)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        started.append((server, thread))
        return server

    yield start
    for server, thread in started:
        server.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def _self_signed(folder: Path, name: str) -> tuple[Path, Path]:
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    args = "req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1"
    subprocess.run(
        [require_tool("openssl"), *args.split(), "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Two self-signed certificates for 127.0.0.1, made with the openssl CLI: the server's and a stranger's."""
    folder = tmp_path_factory.mktemp("certs")
    return {"server": _self_signed(folder, "server"), "other": _self_signed(folder, "other")}


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


def api(server: PodServer, token_file: Path, ca: Path | None, **kwargs: Any) -> ApiServerPods:
    return ApiServerPods("gpu-7", server.base, token_file, ca, **kwargs)


# --- parsing ---------------------------------------------------------------------------------------------


def test_parse_reads_names_labels_annotations_and_the_controller_owner() -> None:
    pods = parse_pod_list(pod_list(TRAINER))
    assert pods == {
        ("ml", "llama-node-0-0-abcde"): PodMeta(
            namespace="ml",
            name="llama-node-0-0-abcde",
            uid="u-1",
            labels={"jobset.sigs.k8s.io/jobset-name": "llama"},  # the non-string value is left out
            annotations={"note": "x"},
            owner_kind="Job",
            owner_name="llama-node-0",
        )
    }


def test_parse_tolerates_missing_fields_and_skips_malformed_items() -> None:
    body = pod_list(
        pod("a", "bare"),
        pod("a", "odd", labels=None, annotations=["x"], ownerReferences=[{"kind": "Job", "name": "j"}], uid=7),
        "not an object",
        None,
        {"metadata": "no"},
        {"spec": {}},
        pod("", "no-namespace"),
        {"metadata": {"name": "no-namespace"}},
        {"metadata": {"namespace": "a", "name": 3}},
    )
    pods = parse_pod_list(body)
    assert set(pods) == {("a", "bare"), ("a", "odd")}
    odd = pods["a", "odd"]
    assert (odd.uid, dict(odd.labels), dict(odd.annotations), odd.owner_kind, odd.owner_name) == (
        "",
        {},
        {},
        None,
        None,
    )
    assert parse_pod_list(b'{"kind": "PodList", "items": null}') == {}


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"{not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b'{"kind": "Pod", "metadata": {}}', "not a PodList (kind Pod)"),
        (b"[]", "not a PodList (kind list)"),
        (b'{"kind": "PodList", "items": {}}', "items is not a list"),
    ],
)
def test_parse_rejects_what_is_not_a_pod_list(body: bytes, says: str) -> None:
    with pytest.raises(PodListError, match=r"^[^\n]*$") as caught:
        parse_pod_list(body)
    assert says in str(caught.value)


# --- the kubelet's read-only port --------------------------------------------------------------------------


def test_kubelet_fetch(serve: Callable[..., PodServer]) -> None:
    server = serve()
    source = KubeletPods(f"{server.base}/pods")
    assert list(source.fetch()) == [("ml", "llama-node-0-0-abcde")]
    path, headers = server.requests[0]
    assert path == "/pods"
    assert headers["Accept"] == "application/json"
    assert "Authorization" not in headers
    assert source.describe() == f"kubelet {server.base}/pods"
    assert KubeletPods().describe() == "kubelet http://127.0.0.1:10255/pods"


def test_kubelet_chunked_answer(serve: Callable[..., PodServer]) -> None:
    server = serve()
    many = [pod("ns", f"p{i}", labels={"k": "v" * 100}) for i in range(2000)]  # several chunks
    server.answer = Answer(body=pod_list(*many), chunked=True)
    assert len(KubeletPods(f"{server.base}/pods").fetch()) == 2000


def test_kubelet_port_closed() -> None:
    source = KubeletPods(f"http://127.0.0.1:{free_loopback_port()}/pods")
    with pytest.raises(PodListError, match=r"^kubelet http://127\.0\.0\.1:\d+/pods: cannot connect: .*refused"):
        source.fetch()


@pytest.mark.parametrize("stall", ["head", "body"])
def test_a_stalling_server_is_cut_at_the_timeout(serve: Callable[..., PodServer], stall: str) -> None:
    """Whether it says nothing, or trickles a byte at a time, the whole fetch ends at the timeout."""
    server = serve()
    server.answer = Answer(stall=stall)
    started = time.monotonic()
    with pytest.raises(PodListError, match=r"no complete answer within 0\.5 s"):
        KubeletPods(f"{server.base}/pods", timeout=0.5).fetch()
    assert 0.4 < time.monotonic() - started < 1.5


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_an_oversized_answer_is_refused(serve: Callable[..., PodServer], chunked: bool) -> None:
    server = serve()
    server.answer = Answer(body=pod_list(*[pod("ns", f"p{i}") for i in range(5000)]), chunked=chunked)
    with pytest.raises(PodListError, match="over the limit"):
        KubeletPods(f"{server.base}/pods", max_bytes=100_000).fetch()


def test_bad_json_and_http_errors_from_the_kubelet(serve: Callable[..., PodServer]) -> None:
    server = serve()
    source = KubeletPods(f"{server.base}/pods")
    server.answer = Answer(body=b"<html>not json</html>")
    with pytest.raises(PodListError, match=r"^kubelet http://\S+: not JSON"):
        source.fetch()
    server.answer = Answer(status=500, body=b"oops")
    with pytest.raises(PodListError, match=r"HTTP 500 Internal Server Error$"):
        source.fetch()


# --- the API server ----------------------------------------------------------------------------------------


def test_api_server_over_https(
    serve: Callable[..., PodServer], certs: dict[str, tuple[Path, Path]], token_file: Path
) -> None:
    server = serve(certs["server"])
    source = api(server, token_file, certs["server"][0])
    assert list(source.fetch()) == [("ml", "llama-node-0-0-abcde")]
    path, headers = server.requests[0]
    url = urlsplit(path)
    assert url.path == "/api/v1/pods"
    assert "fieldSelector=spec.nodeName%3Dgpu-7" in url.query
    assert parse_qs(url.query) == {"fieldSelector": ["spec.nodeName=gpu-7"]}
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    assert headers["Accept"] == "application/json"
    assert source.describe() == f"API server {server.base} (pods on node gpu-7)"


def test_the_rotated_token_is_read_again(
    serve: Callable[..., PodServer], certs: dict[str, tuple[Path, Path]], token_file: Path
) -> None:
    server = serve(certs["server"])
    source = api(server, token_file, certs["server"][0])
    source.fetch()
    token_file.write_text("rotated-token")
    source.fetch()
    assert [headers["Authorization"] for _, headers in server.requests] == [f"Bearer {TOKEN}", "Bearer rotated-token"]


def test_a_certificate_from_another_ca_is_refused(
    serve: Callable[..., PodServer], certs: dict[str, tuple[Path, Path]], token_file: Path
) -> None:
    server = serve(certs["server"])
    with pytest.raises(PodListError, match=r"TLS failed: .*certificate verify failed"):
        api(server, token_file, certs["other"][0]).fetch()
    with pytest.raises(PodListError, match="TLS failed"):  # nor is it trusted by the system's CAs
        api(server, token_file, None).fetch()
    assert server.requests == []  # the token never left


@pytest.mark.parametrize("status", [401, 403])
def test_forbidden_says_what_the_service_account_needs(
    serve: Callable[..., PodServer], certs: dict[str, tuple[Path, Path]], token_file: Path, status: int
) -> None:
    server = serve(certs["server"])
    message = 'pods is forbidden: User "system:serviceaccount:gpuscope:exporter" cannot list resource "pods"'
    status_body = {"kind": "Status", "status": "Failure", "message": message, "code": status}
    server.answer = Answer(status=status, body=json.dumps(status_body).encode())
    with pytest.raises(PodListError) as caught:
        api(server, token_file, certs["server"][0]).fetch()
    text = str(caught.value)
    assert f"HTTP {status} " in text
    assert message in text
    assert "ServiceAccount needs get and list on pods" in text
    assert "\n" not in text
    assert TOKEN not in text


def test_the_api_server_answers_bad_json_or_too_much(
    serve: Callable[..., PodServer], certs: dict[str, tuple[Path, Path]], token_file: Path
) -> None:
    server = serve(certs["server"])
    server.answer = Answer(body=b'{"kind": "PodList", "items": [')
    with pytest.raises(PodListError, match=r"^API server https://\S+ \(pods on node gpu-7\): not JSON"):
        api(server, token_file, certs["server"][0]).fetch()
    server.answer = Answer(body=pod_list(*[pod("ns", f"p{i}") for i in range(5000)]))
    with pytest.raises(PodListError, match="over the limit"):
        api(server, token_file, certs["server"][0], max_bytes=50_000).fetch()


def test_token_problems_never_show_the_token(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    source = ApiServerPods("gpu-7", "https://127.0.0.1:1", token_file, None)
    with pytest.raises(PodListError, match=r"cannot read the token file .*No such file"):
        source.fetch()
    token_file.write_text("secret-part-one\nsecret-part-two")  # a header value http.client would quote
    with pytest.raises(PodListError, match="holds no valid token") as caught:
        source.fetch()
    assert "secret" not in str(caught.value)


def test_in_cluster(
    serve: Callable[..., PodServer], certs: dict[str, tuple[Path, Path]], tmp_path: Path, token_file: Path
) -> None:
    server = serve(certs["server"])
    (tmp_path / "ca.crt").write_bytes(certs["server"][0].read_bytes())
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(server.server_address[1])}
    source = ApiServerPods.in_cluster("gpu-7", env=env, secrets=tmp_path)
    assert source is not None
    assert (source.server, source.token_file, source.ca_file) == (server.base, token_file, tmp_path / "ca.crt")
    assert list(source.fetch()) == [("ml", "llama-node-0-0-abcde")]

    ipv6 = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    source = ApiServerPods.in_cluster("gpu-7", env=ipv6, secrets=tmp_path)
    assert source is not None
    assert source.url == "https://[fd00::1]:443/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-7"


def test_not_in_a_cluster(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert ApiServerPods.in_cluster("gpu-7", env=env, secrets=tmp_path) is None  # no token file
    (tmp_path / "token").write_text(TOKEN)
    assert ApiServerPods.in_cluster("gpu-7", env={}, secrets=tmp_path) is None
    assert ApiServerPods.in_cluster("gpu-7", env={"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, secrets=tmp_path) is None
    source = ApiServerPods.in_cluster("gpu-7", env=env, secrets=tmp_path)
    assert source is not None and source.ca_file is None  # no ca.crt: the system's CAs


def test_plain_http_only_to_loopback(tmp_path: Path) -> None:
    token = tmp_path / "token"
    for server in ("http://10.0.0.1:8080", "http://kubernetes.default.svc", "http://[fd00::1]:80"):
        with pytest.raises(ValueError, match="refusing plain http"):
            ApiServerPods("gpu-7", server, token, None)
    for server in ("http://127.0.0.1:8001", "http://localhost:8001", "http://[::1]:8001", "https://10.0.0.1"):
        ApiServerPods("gpu-7", server, token, None)
    for bad in ("ftp://10.0.0.1", "10.0.0.1:443", "https://10.0.0.1:notaport"):
        with pytest.raises(ValueError):
            ApiServerPods("gpu-7", bad, token, None)
    with pytest.raises(ValueError):
        KubeletPods("127.0.0.1:10255/pods")
