"""Kubernetes job attribution from the kubelet's pod-resources API, off the sampling path.

A listener thread asks the kubelet (v1 `List`, on its unix socket) every sampling interval which pod and
container hold each device, and publishes the answer as one immutable table; `assign()` only reads that
table, so a slow, missing or restarting kubelet never delays a cycle. Pods are grouped into the jobs users
think of (exporter/jobs/workloads.py) with labels from the kubelet's pod list or the API server
(exporter/jobs/pod_metadata.py), fetched when a pod not seen before appears.

`GetAllocatableResources` is asked once per connection, to log how many of the devices the kubelet hands
out are this node's GPUs (a device plugin naming devices in a way we do not match shows up there, once).
`Get` is not used: `List` answers for every pod in one call, and a `Get` per pod would spend the kubelet's
rate limit (100 calls a second for all its clients) for nothing `List` lacks.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc

from gpuscope.exporter.jobs import devices
from gpuscope.exporter.jobs.pod_metadata import PodListError, PodMeta
from gpuscope.exporter.jobs.podresources_wire import (
    GET_ALLOCATABLE,
    LIST,
    Claim,
    PodResources,
    WireError,
    decode_allocatable,
    decode_list,
    encode_empty,
)
from gpuscope.exporter.jobs.workloads import workload_of
from gpuscope.exporter.snapshot import GpuIdentity, JobInfo

log = logging.getLogger(__name__)

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
# The kubelet restarting (an upgrade, a config change) takes seconds and its pods run on meanwhile: the last
# answer stands for this long, then it vouches for nothing (the collector closes the allocations).
STALE_AFTER = 120.0
# Labels of pods already known are not fetched again; a failed fetch is retried after this long.
METADATA_RETRY = 30.0
# gRPC retries a lost unix socket with a backoff growing to 120 s by default: keep it near the interval.
_CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.use_local_subchannel_pool", 1),  # our own connection, not one shared with other channels
)


class PodMetadataSource(Protocol):
    def fetch(self) -> dict[tuple[str, str], PodMeta]: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class _Table:
    """Device key (exporter/jobs/devices.py) -> the job holding it, as of `at` (monotonic seconds)."""

    jobs: Mapping[str, JobInfo] = field(default_factory=dict)
    at: float = float("-inf")


class KubernetesJobs:
    def __init__(
        self,
        socket_path: Path = DEFAULT_SOCKET,
        metadata: PodMetadataSource | None = None,
        interval: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._socket = socket_path
        self._metadata = metadata
        self._interval = interval
        self._timeout = max(0.5, min(interval, 5.0))  # a call never outlives the next poll by much
        # how long before a cycle the kubelet is asked: a List takes milliseconds on a busy node
        self._lead = min(0.1 * interval, 0.25)
        self._last_cycle: float | None = None  # monotonic time of the sampler's last cycle
        self._monotonic = monotonic
        self._table = _Table()
        self._channel: Any = None
        self._state = "starting"  # starting | up | down: a log line when it changes, not every poll
        self._answer: bytes | None = None  # the last List answer read, as sent
        self._labels_missing = False  # pods whose labels are still to be fetched
        self._meta: dict[tuple[str, str], PodMeta] = {}
        self._meta_failed_at = float("-inf")
        self._warned: set[object] = set()
        self.polls = 0

    # --- what the sampler calls: reads the published table, nothing else ---

    def assign(self, gpus: tuple[GpuIdentity, ...], now: float) -> dict[int, JobInfo]:
        self._last_cycle = self._monotonic()  # the listener times its polls by the sampler's cycles
        table = self._fresh()
        found: dict[int, JobInfo] = {}
        for gpu in gpus:
            for name in devices.gpu_keys(gpu.index, gpu.uuid, gpu.pci_bus_id):
                job = table.get(name)
                if job is not None:
                    found[gpu.index] = job
                    break
        return found

    def assign_mig(self, migs: Mapping[int, tuple[str, ...]], now: float) -> dict[str, JobInfo]:
        table = self._fresh()
        found: dict[str, JobInfo] = {}
        for index, uuids in migs.items():
            for position, uuid in enumerate(uuids):
                for name in devices.mig_keys(index, position, uuid):
                    job = table.get(name)
                    if job is not None:
                        found[uuid] = job
                        break
        return found

    def _fresh(self) -> Mapping[str, JobInfo]:
        table = self._table  # one reference read: the listener swaps whole tables
        return table.jobs if self._monotonic() - table.at <= STALE_AFTER else {}

    # --- the listener ---

    def run(self, stop: threading.Event) -> None:
        """Poll until `stop` is set (NodeExporter runs this in its own thread)."""
        try:
            while True:
                self.poll_once()
                if stop.wait(self.until_next_poll()):
                    return
        finally:
            self.close()

    def until_next_poll(self) -> float:
        """Seconds until the next poll: just before the sampler's next cycle, so that a pod that started
        or ended is in the next sample (allocations then start and end within one sampling interval of
        the kubelet's word), and once a cycle, so the kubelet is asked no more often than we sample."""
        now = self._monotonic()
        if self._last_cycle is None:
            return self._interval
        next_poll = self._last_cycle + self._interval - self._lead
        while next_poll <= now + self._lead:  # missed (a slow call): aim at the cycle after
            next_poll += self._interval
        return next_poll - now

    def poll_once(self) -> None:
        self.polls += 1
        answer = self._list()
        if answer is None:
            return
        if answer == self._answer and not self._labels_missing:  # the usual poll: nothing changed
            self._table = _Table(self._table.jobs, self._monotonic())
            return
        try:
            pods = decode_list(answer)
        except WireError as exc:
            self._went("down", "jobs: kubelet pod-resources answer not understood (%s); retrying", exc)
            return
        if self._state != "up":
            self._went("up", "jobs: Kubernetes (kubelet pod-resources at %s, %d pods)", self._socket, len(pods))
            self._log_allocatable()
        self._refresh_metadata({(p.namespace, p.name) for p in pods})
        self._table = _Table(self._jobs_by_device(pods), self._monotonic())
        self._answer = answer

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def _list(self) -> bytes | None:
        """List's answer as sent: decoded by the caller, not by gRPC, which would log a traceback for each
        answer its deserializer refused, and only when it differs from the last one."""
        if not self._socket.exists():
            self._went("down", "jobs: kubelet pod-resources socket %s is not there (yet); waiting for it", self._socket)
            return None
        if self._channel is None:
            self._channel = grpc.insecure_channel(f"unix:{os.fspath(self._socket)}", options=_CHANNEL_OPTIONS)
        try:
            answer: bytes = self._channel.unary_unary(LIST, request_serializer=encode_empty)(b"", timeout=self._timeout)
        except grpc.RpcError as exc:
            self._went("down", "jobs: kubelet pod-resources List failed (%s: %s); retrying", exc.code(), exc.details())
            return None
        if self._state == "down":
            self._answer = None  # a kubelet back from a restart: read its answer afresh, and say so
        return answer

    def _went(self, state: str, message: str, *args: object) -> None:
        if self._state != state:
            self._state = state
            log.log(logging.INFO if state == "up" else logging.WARNING, message, *args)

    def _log_allocatable(self) -> None:
        try:
            call = self._channel.unary_unary(GET_ALLOCATABLE, request_serializer=encode_empty)
            entries = decode_allocatable(call(b"", timeout=self._timeout))
        except grpc.RpcError as exc:  # a kubelet older than 1.21, or the feature gate off
            log.info("jobs: the kubelet does not list allocatable devices (%s: %s)", exc.code(), exc.details())
            return
        except WireError as exc:
            log.info("jobs: the kubelet's allocatable devices not understood (%s)", exc)
            return
        counts: dict[str, int] = {}
        for resource, ids in entries:
            counts[resource] = counts.get(resource, 0) + len(ids)
        listed = ", ".join(f"{name} x{count}" for name, count in sorted(counts.items())) or "none"
        log.info("jobs: the kubelet hands out %s", listed)

    def _refresh_metadata(self, pods: set[tuple[str, str]]) -> None:
        if self._metadata is None:
            return
        self._meta = {pod: meta for pod, meta in self._meta.items() if pod in pods}  # forget ended pods
        unknown = pods - self._meta.keys()
        self._labels_missing = bool(unknown)
        if not unknown or self._monotonic() - self._meta_failed_at < METADATA_RETRY:
            return
        try:
            fetched = self._metadata.fetch()
        except PodListError as exc:
            self._meta_failed_at = self._monotonic()
            self._warn_once(
                ("meta", str(exc)),
                "jobs: no pod labels from %s (%s): each pod counts as its own job until they come; retrying every %ds",
                self._metadata.describe(),
                exc,
                int(METADATA_RETRY),
            )
            return
        self._meta.update({pod: meta for pod, meta in fetched.items() if pod in pods})
        self._labels_missing = bool(unknown - fetched.keys())
        if self._labels_missing:
            self._meta_failed_at = self._monotonic()  # pods the list does not have yet: ask again later

    def _jobs_by_device(self, pods: Iterable[PodResources]) -> dict[str, JobInfo]:
        table: dict[str, JobInfo] = {}
        for pod in sorted(pods, key=lambda p: (p.namespace, p.name)):
            workload = workload_of(pod.namespace, pod.name, self._meta.get((pod.namespace, pod.name)))
            for container in pod.containers:
                job = JobInfo(
                    job_id=workload.job_id(pod.namespace),
                    namespace=pod.namespace,
                    pod=pod.name,
                    container=container.name,
                    workload=f"{workload.kind}/{workload.name}",
                )
                names = [devices.plugin_key(resource, i) for resource, ids in container.devices for i in ids]
                names += self._claim_keys(pod, container.claims)
                for name in names:
                    holder = table.setdefault(name, job)
                    if holder is not job and holder.pod != job.pod:
                        self._warn_once(
                            ("shared", name, holder.pod, job.pod),
                            "jobs: device %s is shared by pods %s/%s and %s/%s (time-slicing?): the first has it",
                            name,
                            holder.namespace,
                            holder.pod,
                            job.namespace,
                            job.pod,
                        )
        return table

    def _claim_keys(self, pod: PodResources, claims: Iterable[Claim]) -> list[str]:
        names = []
        for claim in claims:
            for device in claim.devices:
                if devices.DRA_MIG.match(device.device):
                    self._warn_once(
                        ("dra-mig", device.device),
                        "jobs: DRA device %s of claim %s/%s (pod %s) is a MIG slice the name does not identify:"
                        " not attributed",
                        device.device,
                        claim.namespace,
                        claim.name,
                        pod.name,
                    )
                    continue
                names.append(devices.claim_key(device.device))
                # CDI names ("vendor.com/class=NAME") may carry the device's UUID where the name does not
                names += [devices.claim_key(cdi.rsplit("=", 1)[-1]) for cdi in device.cdi_devices]
        return names

    def _warn_once(self, key: object, message: str, *args: object) -> None:
        if len(self._warned) > 10_000:  # pods come and go for months: keep the memory bounded
            self._warned.clear()
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message, *args)
