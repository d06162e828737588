"""Turns a snapshot into metric families and serves them rendered; never reads hardware."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from gpuscope.exporter.amd_compat import amd_families
from gpuscope.exporter.catalog import MetricSpec, metrics_for
from gpuscope.exporter.clock_events import clock_event_family
from gpuscope.exporter.dcgm_compat import dcgm_families
from gpuscope.exporter.snapshot import UNKNOWN_XID, JobInfo, Snapshot
from gpuscope.exporter.textformat import TEXT_CONTENT_TYPE, Family, label_block, negotiate, render

# Where the latest snapshot is read from: the sampler's attribute, or a fixed one in tests.
LatestSnapshot = Callable[[], Snapshot | None]


@dataclass(frozen=True)
class ExporterIdentity:
    cluster: str
    rack: str
    node: str
    backend: str
    version: str


def families(snapshot: Snapshot | None, identity: ExporterIdentity) -> Iterator[Family]:
    info = Family("gpuscope_exporter_info", "gauge", "Exporter identity")
    info.add(
        label_block(
            # exporter_*: Prometheus's target labels (file_sd) carry the topology as cluster and rack
            ["exporter_cluster", "exporter_rack", "node", "backend", "version"],
            [identity.cluster, identity.rack, identity.node, identity.backend, identity.version],
        ),
        1,
    )
    yield info
    if snapshot is None:
        return
    last = Family("gpuscope_exporter_last_sample_timestamp_seconds", "gauge", "When the latest sample was taken")
    last.add("", snapshot.ts)
    duration = Family("gpuscope_exporter_sample_duration_seconds", "gauge", "Time the latest sampling cycle took")
    duration.add("", snapshot.sample_seconds)
    yield last
    yield duration
    yield from _gpu_families(snapshot)
    yield from _port_families(snapshot)


def _family(spec: MetricSpec) -> Family:
    return Family(spec.prom_name.removesuffix("_total"), spec.type, spec.help)


def _gpu_families(snapshot: Snapshot) -> Iterator[Family]:
    up = Family("gpuscope_gpu_up", "gauge", "1 if the GPU answered this cycle")
    info = Family("gpuscope_gpu_info", "gauge", "GPU identity")
    xids = Family(
        "gpuscope_gpu_xid_errors",
        "counter",
        "XID errors reported by the driver since the exporter started, by code (unknown: not identified)",
    )
    gpu_labels = []
    for reading in snapshot.gpus:
        gpu = reading.gpu
        labels = label_block(["gpu", "uuid"], [str(gpu.index), gpu.uuid])
        gpu_labels.append(labels)
        up.add(labels, 1 if reading.up else 0)
        info.add(
            label_block(["gpu", "uuid", "model", "pci_bus_id"], [str(gpu.index), gpu.uuid, gpu.model, gpu.pci_bus_id]),
            1,
        )
        for xid, count in sorted(reading.xid_counts.items()):
            xids.add(labels[:-1] + f',xid="{_xid_label(xid)}"}}', count)
    yield up
    yield info
    if snapshot.jobs is not None:
        yield _job_family(snapshot)
    for spec in metrics_for("gpu"):
        if not spec.prom_name:
            continue
        family = _family(spec)
        for reading, labels in zip(snapshot.gpus, gpu_labels, strict=True):
            value = reading.values.get(spec.key)
            if value is not None:
                family.add(labels, value * spec.prom_scale)
        yield family
    yield clock_event_family(snapshot.gpus, gpu_labels)
    link_labels = [
        {link: labels[:-1] + f',link="{link}"}}' for link in reading.links}
        for reading, labels in zip(snapshot.gpus, gpu_labels, strict=True)
    ]
    for spec in metrics_for("nvlink"):
        family = _family(spec)
        for reading, labels_of in zip(snapshot.gpus, link_labels, strict=True):
            for link, link_values in reading.links.items():
                value = link_values.get(spec.key)
                if value is not None:
                    family.add(labels_of[link], value * spec.prom_scale)
        yield family
    yield xids
    yield from _mig_families(snapshot, gpu_labels)


def _xid_label(code: int) -> str:
    """The XID as Prometheus shows it: its number, or "unknown" for one the driver could not identify
    (NVML's 999, counted under UNKNOWN_XID; the collector stores it as code 0)."""
    return "unknown" if code == UNKNOWN_XID else str(code)


def _job_family(snapshot: Snapshot) -> Family:
    """Which job holds each GPU (GPUs without a job have no sample), for joins in PromQL."""
    jobs = Family("gpuscope_gpu_job_info", "gauge", "1 for the job holding the GPU (job_id, user; pod on Kubernetes)")
    for reading in snapshot.gpus:
        job = (snapshot.jobs or {}).get(reading.gpu.index)
        if job is not None:
            names, values = _job_labels(job)
            jobs.add(label_block(["gpu", "uuid", *names], [str(reading.gpu.index), reading.gpu.uuid, *values]), 1)
    return jobs


def _job_labels(job: JobInfo) -> tuple[list[str], list[str]]:
    """A job's labels: its id and user, and on Kubernetes the pod holding the device and its workload."""
    if job.pod is None:
        return ["job_id", "user"], [job.job_id, job.user or ""]
    names = ["job_id", "user", "namespace", "pod", "container", "workload"]
    return names, [job.job_id, job.user or "", job.namespace or "", job.pod, job.container or "", job.workload or ""]


def _mig_families(snapshot: Snapshot, gpu_labels: list[str]) -> Iterator[Family]:
    """Per MIG GPU instance, labelled by the parent GPU and the instance's id; only GPUs in MIG mode."""
    migs = [(reading, labels) for reading, labels in zip(snapshot.gpus, gpu_labels, strict=True) if reading.mig]
    if not migs:
        return
    info = Family("gpuscope_mig_info", "gauge", "MIG devices: GPU instance, compute instance, profile, MIG UUID")
    names = ["gpu", "uuid", "gpu_instance_id", "compute_instance_id", "profile", "mig_uuid"]
    for reading, _ in migs:
        for mig in reading.mig:
            gpu = reading.gpu
            ids = [str(gpu.index), gpu.uuid, str(mig.gpu_instance_id), str(mig.compute_instance_id)]
            info.add(label_block(names, [*ids, mig.profile, mig.uuid]), 1)
    yield info
    for spec in metrics_for("mig"):
        family = _family(spec)
        for reading, labels in migs:
            for mig in reading.mig:
                value = mig.values.get(spec.key)
                if value is not None:
                    family.add(labels[:-1] + f',gpu_instance_id="{mig.gpu_instance_id}"}}', value * spec.prom_scale)
        yield family
    if snapshot.mig_jobs is not None:
        yield _mig_job_family(snapshot)


def _mig_job_family(snapshot: Snapshot) -> Family:
    """Which job holds each MIG device, where job attribution tells instances apart."""
    jobs = Family("gpuscope_mig_job_info", "gauge", "1 for the job that holds the MIG device (job_id, user; pod)")
    names = ["gpu", "uuid", "gpu_instance_id", "compute_instance_id", "mig_uuid"]
    for reading in snapshot.gpus:
        for mig in reading.mig:
            job = (snapshot.mig_jobs or {}).get(mig.uuid)
            if job is not None:
                ids = [str(reading.gpu.index), reading.gpu.uuid, str(mig.gpu_instance_id), str(mig.compute_instance_id)]
                job_names, job_values = _job_labels(job)
                jobs.add(label_block([*names, *job_names], [*ids, mig.uuid, *job_values]), 1)
    return jobs


def _port_families(snapshot: Snapshot) -> Iterator[Family]:
    port_labels = [label_block(["device", "port"], [r.port.device, str(r.port.port)]) for r in snapshot.ports]
    for spec in metrics_for("ib"):
        family = _family(spec)
        for reading, labels in zip(snapshot.ports, port_labels, strict=True):
            value = reading.values.get(spec.key)
            if value is not None:
                family.add(labels, value * spec.prom_scale)
        yield family


@dataclass(frozen=True)
class NameSets:
    """Which names one scrape serves: gpuscope's own, dcgm-exporter's, AMD device-metrics-exporter's."""

    native: bool = True
    dcgm: bool = False
    amd: bool = False

    def __post_init__(self) -> None:
        if not (self.native or self.dcgm or self.amd):
            raise ValueError("compat names only, but no compatible name set chosen (--dcgm-compat or --amd-compat)")


class Exposition:
    """Serves rendered bytes, rendering each snapshot at most once per format."""

    def __init__(
        self,
        identity: ExporterIdentity,
        latest: LatestSnapshot,
        names: NameSets = NameSets(),
        extra: Callable[[], Iterable[Family]] | None = None,
    ) -> None:
        self._identity = identity
        self._latest = latest
        self._names = names
        self._extra = extra  # the exporter's own figures (push queue, spool), rendered with each snapshot
        self._cache: dict[str, tuple[object, bytes]] = {}
        self._lock = threading.Lock()

    def render(self, accept_header: str | None) -> tuple[bytes, str]:
        names = self._names
        # dcgm-exporter and AMD's exporter serve the text format only, and their counters lack the
        # _total suffix that OpenMetrics requires: with their names, so do we
        content_type = TEXT_CONTENT_TYPE if names.dcgm or names.amd else negotiate(accept_header)
        snapshot = self._latest()
        with self._lock:
            cached = self._cache.get(content_type)
            if cached is not None and cached[0] is snapshot and snapshot is not None:
                return cached[1], content_type
            found: list[Iterable[Family]] = []
            if names.native:
                found += [families(snapshot, self._identity), self._extra() if self._extra else ()]
            if snapshot is not None and names.dcgm:
                found.append(dcgm_families(snapshot, self._identity.node))
            if snapshot is not None and names.amd:
                found.append(amd_families(snapshot, self._identity.node))
            body = render(itertools.chain(*found), content_type)
            self._cache[content_type] = (snapshot, body)
        return body, content_type
