"""A fake kubelet: a real gRPC server on a unix socket that speaks the pod-resources v1 API with scripted answers.

    kubelet = FakeKubelet("/tmp/k.../pod-resources/kubelet.sock")
    kubelet.start()
    kubelet.set_pods([Pod("train-0", "ml", [Container("main", {"nvidia.com/gpu": ["GPU-1", "GPU-2"]})])])
    ...  # the code under test connects to kubelet.target ("unix:/tmp/k.../kubelet.sock")
    kubelet.stop()

Everything can change while it serves (each call sees the state of the moment) and calls can be made slow
(`set_delay`) or refused (`disable`). Where the kubelet has a habit that clients must cope with, the fake has
it too (pkg/kubelet/apis/podresources/server_v1.go, pkg/kubelet/cm/container_manager_linux.go):

- one ContainerDevices entry per device id (and per NUMA node of that device), never one per resource name;
- Get for an unknown pod fails with UNKNOWN "pod NAME in namespace NS not found" (a plain Go error);
- a method switched off by a feature gate fails with UNKNOWN and the kubelet's message
  (`disable(method, grpc.StatusCode.UNKNOWN)`), a kubelet older than the method answers UNIMPLEMENTED
  (`disable(method)`, the default code);
- a server-wide token bucket of 100 calls a second with bursts of 10 answers RESOURCE_EXHAUSTED
  "rejected by rate limit" (rate_limit=None turns it off).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import grpc

from tests.k8s.protos import SERVICE, PodResourcesProtos, load

METHODS = ("List", "GetAllocatableResources", "Get")
# sockaddr_un.sun_path is 108 bytes on Linux, the terminating NUL included
MAX_SOCKET_PATH_BYTES = 107
# the kubelet's rate limit on this API (pkg/kubelet/apis/podresources/grpc/ratelimit.go)
KUBELET_RATE_LIMIT = (100.0, 10)

# What a kubelet says when the method exists but its feature gate is off (a plain Go error: code UNKNOWN).
_DISABLED_MESSAGES = {
    "Get": "PodResources API Get method disabled",
    "GetAllocatableResources": "Pod Resources API GetAllocatableResources disabled",
}


@dataclass(frozen=True)
class ClaimDevice:
    """One device of a DRA claim (ClaimResource): its CDI device names and the driver/pool/device triplet."""

    cdi_devices: Sequence[str] = ()
    driver: str = ""
    pool: str = ""
    device: str = ""
    share_id: str | None = None


@dataclass(frozen=True)
class Claim:
    """A DRA resource claim prepared for a container (DynamicResource)."""

    name: str
    namespace: str
    devices: Sequence[ClaimDevice] = ()


@dataclass(frozen=True)
class Container:
    """A container and what the kubelet assigned it: device-plugin devices by resource name, DRA claims, CPUs."""

    name: str
    devices: Mapping[str, Sequence[str]] = field(default_factory=dict)
    claims: Sequence[Claim] = ()
    cpu_ids: Sequence[int] = ()


@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str = "default"
    containers: Sequence[Container] = ()


@dataclass(frozen=True)
class _Failure:
    code: grpc.StatusCode
    details: str


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class _State:
    """Everything a call answers from; replaced as a whole under the lock, never changed in place."""

    pods: tuple[Any, ...] = ()  # Pod, or a PodResources message served as it is
    allocatable: Mapping[str, tuple[str, ...]] = field(default_factory=_empty)
    allocatable_cpu_ids: tuple[int, ...] = ()
    topology: Mapping[str, tuple[int, ...]] = field(default_factory=_empty)
    delays: Mapping[str, float] = field(default_factory=_empty)
    failures: Mapping[str, _Failure] = field(default_factory=_empty)


class _TokenBucket:
    """golang.org/x/time/rate's Limiter.Allow: starts full, refills at `rate` a second up to `burst`."""

    def __init__(self, rate: float, burst: int) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._tokens = float(burst)
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
            self._last = now
            if self._tokens >= 1:
                self._tokens -= 1
                return True
            return False


class FakeKubelet:
    """The kubelet's pod-resources endpoint on `socket_path`, serving what the test scripts."""

    def __init__(
        self,
        socket_path: str | os.PathLike[str],
        *,
        protos: PodResourcesProtos | None = None,
        rate_limit: tuple[float, int] | None = KUBELET_RATE_LIMIT,
        max_workers: int = 8,
    ) -> None:
        path = os.path.abspath(os.fspath(socket_path))
        if len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES:
            raise ValueError(f"unix socket path longer than {MAX_SOCKET_PATH_BYTES} bytes: {path}")
        self.socket_path = path
        # the stubs to serve with; pass the exporter's own generated modules to keep one copy per process
        self.protos = protos or load()
        self._rate_limit = rate_limit
        self._max_workers = max_workers
        self._lock = threading.Lock()
        self._state = _State()
        self._calls: list[tuple[str, Any]] = []
        self._server: grpc.Server | None = None
        self._executor: futures.ThreadPoolExecutor | None = None
        self._limiter: _TokenBucket | None = None
        self._waiting: set[threading.Event] = set()

    @property
    def target(self) -> str:
        """The gRPC target a client dials: grpc.insecure_channel(kubelet.target)."""
        return f"unix:{self.socket_path}"

    @property
    def running(self) -> bool:
        return self._server is not None

    # ---- the script -------------------------------------------------------------------------------------

    def set_pods(self, pods: Iterable[Pod | Any]) -> None:
        """What List answers (and Get looks up), in this order. A PodResources message is served as given."""
        frozen: list[Any] = []
        for pod in pods:
            if isinstance(pod, Pod):
                frozen.append(_freeze_pod(pod))
            elif isinstance(pod, self.protos.pb2.PodResources):
                copy = self.protos.pb2.PodResources()
                copy.CopyFrom(pod)
                frozen.append(copy)
            else:
                raise TypeError(f"a Pod or a v1.PodResources message, not {type(pod).__name__}")
        self._update(pods=tuple(frozen))

    def set_allocatable(self, devices: Mapping[str, Sequence[str]], cpu_ids: Sequence[int] = ()) -> None:
        """What GetAllocatableResources answers: every device the kubelet knows, by resource name."""
        self._update(allocatable=_freeze_devices(devices), allocatable_cpu_ids=tuple(cpu_ids))

    def set_topology(self, numa_nodes: Mapping[str, int | Sequence[int]]) -> None:
        """NUMA node(s) of device ids, reported with them everywhere; a device left out is reported without."""
        topology = {dev: (nodes,) if isinstance(nodes, int) else tuple(nodes) for dev, nodes in numa_nodes.items()}
        self._update(topology=MappingProxyType(topology))

    def set_delay(self, seconds: float, *methods: str) -> None:
        """Hold each call of `methods` (all of them if none is named) this long before answering; 0 to stop."""
        names = _methods(methods)
        with self._lock:
            delays = dict(self._state.delays)
            for method in names:
                if seconds > 0:
                    delays[method] = seconds
                else:
                    delays.pop(method, None)
            self._state = replace(self._state, delays=MappingProxyType(delays))

    def disable(self, method: str, code: grpc.StatusCode = grpc.StatusCode.UNIMPLEMENTED, details: str = "") -> None:
        """Refuse `method` from now on. UNIMPLEMENTED (the default) is a kubelet older than the method, answered
        by gRPC itself before any rate limit or delay; UNKNOWN with the kubelet's own message is a kubelet whose
        feature gate for it is off (KubeletPodResourcesGet, KubeletPodResourcesGetAllocatable)."""
        (method,) = _methods((method,))
        if not details:
            if code == grpc.StatusCode.UNIMPLEMENTED:
                details = f"unknown method {method} for service {SERVICE}"  # grpc-go's words
            else:
                details = _DISABLED_MESSAGES.get(method, f"PodResources API {method} method disabled")
        self._set_failure(method, _Failure(code, details))

    def enable(self, method: str) -> None:
        (method,) = _methods((method,))
        self._set_failure(method, None)

    def calls(self, method: str | None = None) -> list[Any]:
        """The requests received (every call that reached the server, refused ones included), oldest first."""
        with self._lock:
            return [request for name, request in self._calls if method is None or name == method]

    def _set_failure(self, method: str, failure: _Failure | None) -> None:
        with self._lock:
            failures = dict(self._state.failures)
            if failure is None:
                failures.pop(method, None)
            else:
                failures[method] = failure
            self._state = replace(self._state, failures=MappingProxyType(failures))

    def _update(self, **changes: Any) -> None:
        with self._lock:
            self._state = replace(self._state, **changes)

    # ---- the server -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Listen on the socket: a fresh server, as a restarted kubelet is (and a fresh rate limit)."""
        with self._lock:
            if self._server is not None:
                raise RuntimeError(f"fake kubelet already serving on {self.socket_path}")
            os.makedirs(os.path.dirname(self.socket_path), exist_ok=True)
            _remove_stale_socket(self.socket_path)
            executor = futures.ThreadPoolExecutor(self._max_workers, thread_name_prefix="fake-kubelet")
            server = grpc.server(executor)
            self.protos.pb2_grpc.add_PodResourcesListerServicer_to_server(_Servicer(self), server)
            try:
                server.add_insecure_port(self.target)
            except RuntimeError as exc:
                executor.shutdown(wait=False)
                raise RuntimeError(f"cannot listen on {self.target}: {exc}") from exc
            server.start()
            self._limiter = _TokenBucket(*self._rate_limit) if self._rate_limit else None
            self._server, self._executor = server, executor

    def stop(self, grace: float | None = None) -> None:
        """Stop serving and remove the socket, as a kubelet going away does. Calls in flight are cancelled."""
        with self._lock:
            server, executor = self._server, self._executor
            self._server = self._executor = None
            waiting = list(self._waiting)
        if server is None:
            return
        stopped = server.stop(grace)  # cancels the calls in flight (their clients see UNAVAILABLE)...
        for event in waiting:  # ...and this cuts delayed ones short, so that no handler answers late
            event.set()
        stopped.wait(10)
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        _remove_stale_socket(self.socket_path)

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> FakeKubelet:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ---- answering --------------------------------------------------------------------------------------

    def _begin(self, method: str, request: Any, context: grpc.ServicerContext) -> _State:
        """The steps every call goes through before its answer; returns the state to answer from."""
        with self._lock:
            self._calls.append((method, request))
            state, limiter = self._state, self._limiter
        failure = state.failures.get(method)
        if failure is not None and failure.code == grpc.StatusCode.UNIMPLEMENTED:
            context.abort(failure.code, failure.details)
        if limiter is not None and not limiter.allow():
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")
        delay = state.delays.get(method, 0.0)
        if delay > 0:
            self._wait(delay, context)
            with self._lock:
                state = self._state  # answer with what holds once the kubelet gets round to it
            failure = state.failures.get(method)
        if failure is not None:
            context.abort(failure.code, failure.details)
        return state

    def _wait(self, seconds: float, context: grpc.ServicerContext) -> None:
        """Sleep, but wake as soon as the client gives up (deadline, cancel) or the server stops."""
        done = threading.Event()
        with self._lock:
            self._waiting.add(done)
        try:
            context.add_callback(done.set)
            done.wait(seconds)
        finally:
            with self._lock:
                self._waiting.discard(done)
        if not context.is_active():
            context.abort(grpc.StatusCode.CANCELLED, "the call ended while the fake kubelet was delaying it")

    def _pod_message(self, pod: Any, state: _State) -> Any:
        pb2 = self.protos.pb2
        if isinstance(pod, pb2.PodResources):
            return pod
        message = pb2.PodResources(name=pod.name, namespace=pod.namespace)
        for container in pod.containers:
            message.containers.append(
                pb2.ContainerResources(
                    name=container.name,
                    devices=self._device_messages(container.devices, state),
                    cpu_ids=container.cpu_ids,
                    dynamic_resources=[self._claim_message(claim) for claim in container.claims],
                )
            )
        return message

    def _device_messages(self, devices: Mapping[str, Sequence[str]], state: _State) -> list[Any]:
        """As the kubelet builds them (containerDevicesFromResourceDeviceInstances): one entry per device id,
        and one per NUMA node when a device has several."""
        pb2 = self.protos.pb2
        out = []
        for resource_name, device_ids in devices.items():
            for device_id in device_ids:
                nodes = state.topology.get(device_id)
                if not nodes:
                    out.append(pb2.ContainerDevices(resource_name=resource_name, device_ids=[device_id]))
                    continue
                for node in nodes:
                    topology = pb2.TopologyInfo(nodes=[pb2.NUMANode(ID=node)])
                    out.append(
                        pb2.ContainerDevices(resource_name=resource_name, device_ids=[device_id], topology=topology)
                    )
        return out

    def _claim_message(self, claim: Claim) -> Any:
        pb2 = self.protos.pb2
        resources = []
        for device in claim.devices:
            resource = pb2.ClaimResource(
                cdi_devices=[pb2.CDIDevice(name=name) for name in device.cdi_devices],
                driver_name=device.driver,
                pool_name=device.pool,
                device_name=device.device,
            )
            if device.share_id is not None:
                resource.share_id = device.share_id
            resources.append(resource)
        return pb2.DynamicResource(claim_name=claim.name, claim_namespace=claim.namespace, claim_resources=resources)

    def _list(self, request: Any, context: grpc.ServicerContext) -> Any:
        state = self._begin("List", request, context)
        pods = [self._pod_message(pod, state) for pod in state.pods]
        return self.protos.pb2.ListPodResourcesResponse(pod_resources=pods)

    def _get_allocatable(self, request: Any, context: grpc.ServicerContext) -> Any:
        state = self._begin("GetAllocatableResources", request, context)
        return self.protos.pb2.AllocatableResourcesResponse(
            devices=self._device_messages(state.allocatable, state), cpu_ids=state.allocatable_cpu_ids
        )

    def _get(self, request: Any, context: grpc.ServicerContext) -> Any:
        state = self._begin("Get", request, context)
        for pod in state.pods:
            if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                return self.protos.pb2.GetPodResourcesResponse(pod_resources=self._pod_message(pod, state))
        context.abort(grpc.StatusCode.UNKNOWN, f"pod {request.pod_name} in namespace {request.pod_namespace} not found")


class _Servicer:
    """v1.PodResourcesLister's three methods, answered by the FakeKubelet."""

    def __init__(self, kubelet: FakeKubelet) -> None:
        self.List = kubelet._list
        self.GetAllocatableResources = kubelet._get_allocatable
        self.Get = kubelet._get


def _methods(methods: Iterable[str]) -> tuple[str, ...]:
    names = tuple(methods) or METHODS
    unknown = [name for name in names if name not in METHODS]
    if unknown:
        raise ValueError(f"not a method of {SERVICE}: {', '.join(unknown)} (one of {', '.join(METHODS)})")
    return names


def _strings(values: Sequence[str]) -> tuple[str, ...]:
    if isinstance(values, str):  # "GPU-1" would otherwise become ("G", "P", "U", ...)
        raise TypeError(f"a list of strings, not the string {values!r}")
    return tuple(values)


def _freeze_devices(devices: Mapping[str, Sequence[str]]) -> Mapping[str, tuple[str, ...]]:
    return MappingProxyType({resource_name: _strings(ids) for resource_name, ids in devices.items()})


def _freeze_pod(pod: Pod) -> Pod:
    """A copy that later changes to the caller's lists and dicts cannot reach."""
    containers = tuple(
        Container(
            name=container.name,
            devices=_freeze_devices(container.devices),
            claims=tuple(
                Claim(
                    name=claim.name,
                    namespace=claim.namespace,
                    devices=tuple(
                        replace(device, cdi_devices=_strings(device.cdi_devices)) for device in claim.devices
                    ),
                )
                for claim in container.claims
            ),
            cpu_ids=tuple(container.cpu_ids),
        )
        for container in pod.containers
    )
    return Pod(name=pod.name, namespace=pod.namespace, containers=containers)


@contextlib.contextmanager
def short_socket_path(name: str = "kubelet.sock") -> Iterator[str]:
    """A socket path in a new private directory under /tmp, removed afterwards: pytest's tmp_path can be too
    deep for sun_path. The directory mirrors the kubelet's: /tmp/kXXXXXXXX/pod-resources/kubelet.sock."""
    directory = tempfile.mkdtemp(prefix="k", dir="/tmp")
    try:
        yield os.path.join(directory, "pod-resources", name)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _remove_stale_socket(path: str) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise RuntimeError(f"{path} exists and is not a socket: not removing it")
    os.unlink(path)
