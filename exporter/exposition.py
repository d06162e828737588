"""Renders a snapshot in the Prometheus text format or OpenMetrics; never reads hardware."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry

from exporter.catalog import MetricSpec, metrics_for
from exporter.dcgm_compat import dcgm_families
from exporter.snapshot import Snapshot

# Where the latest snapshot is read from: the sampler's attribute, or a fixed one in tests.
LatestSnapshot = Callable[[], Snapshot | None]


@dataclass(frozen=True)
class ExporterIdentity:
    cluster: str
    rack: str
    node: str
    backend: str
    version: str


class SnapshotCollector(Collector):
    """Turns the latest snapshot into metric families (one per catalog entry with any value)."""

    def __init__(self, identity: ExporterIdentity, latest: LatestSnapshot, dcgm_compat: bool = False) -> None:
        self._identity = identity
        self._latest = latest
        self._dcgm_compat = dcgm_compat

    def collect(self) -> Iterable[Metric]:
        if self._dcgm_compat:
            snapshot = self._latest()
            if snapshot is not None:
                yield from dcgm_families(snapshot, hostname=self._identity.node)
            return
        info = GaugeMetricFamily(
            "gpuscope_exporter_info", "Exporter identity", labels=["cluster", "rack", "node", "backend", "version"]
        )
        ident = self._identity
        info.add_metric([ident.cluster, ident.rack, ident.node, ident.backend, ident.version], 1)
        yield info
        snapshot = self._latest()
        if snapshot is None:
            return
        yield GaugeMetricFamily(
            "gpuscope_exporter_last_sample_timestamp_seconds", "When the latest sample was taken", value=snapshot.ts
        )
        yield GaugeMetricFamily(
            "gpuscope_exporter_sample_duration_seconds",
            "Time the latest sampling cycle took",
            value=snapshot.sample_seconds,
        )
        yield from _gpu_families(snapshot)
        yield from _link_families(snapshot)
        yield from _xid_family(snapshot)
        yield from _port_families(snapshot)


def _family(spec: MetricSpec, labels: list[str]) -> GaugeMetricFamily | CounterMetricFamily:
    if spec.type == "counter":
        return CounterMetricFamily(spec.prom_name.removesuffix("_total"), spec.help, labels=labels)
    return GaugeMetricFamily(spec.prom_name, spec.help, labels=labels)


def _gpu_families(snapshot: Snapshot) -> Iterable[Metric]:
    labels = ["gpu", "uuid"]
    up = GaugeMetricFamily("gpuscope_gpu_up", "1 if the GPU answered this cycle", labels=labels)
    info = GaugeMetricFamily("gpuscope_gpu_info", "GPU identity", labels=["gpu", "uuid", "model", "pci_bus_id"])
    for reading in snapshot.gpus:
        gpu = reading.gpu
        up.add_metric([str(gpu.index), gpu.uuid], 1 if reading.up else 0)
        info.add_metric([str(gpu.index), gpu.uuid, gpu.model, gpu.pci_bus_id], 1)
    yield up
    yield info
    for spec in metrics_for("gpu"):
        family = _family(spec, labels)
        for reading in snapshot.gpus:
            value = reading.values.get(spec.key)
            if value is not None:
                family.add_metric([str(reading.gpu.index), reading.gpu.uuid], value * spec.prom_scale)
        if family.samples:
            yield family


def _link_families(snapshot: Snapshot) -> Iterable[Metric]:
    for spec in metrics_for("nvlink"):
        family = _family(spec, ["gpu", "uuid", "link"])
        for reading in snapshot.gpus:
            for link, values in reading.links.items():
                value = values.get(spec.key)
                if value is not None:
                    family.add_metric([str(reading.gpu.index), reading.gpu.uuid, str(link)], value * spec.prom_scale)
        if family.samples:
            yield family


def _xid_family(snapshot: Snapshot) -> Iterable[Metric]:
    family = CounterMetricFamily(
        "gpuscope_gpu_xid_errors", "XID errors reported by the driver since the exporter started, by code",
        labels=["gpu", "uuid", "xid"],
    )
    for reading in snapshot.gpus:
        for xid, count in sorted(reading.xid_counts.items()):
            family.add_metric([str(reading.gpu.index), reading.gpu.uuid, str(xid)], count)
    if family.samples:
        yield family


def _port_families(snapshot: Snapshot) -> Iterable[Metric]:
    for spec in metrics_for("ib"):
        family = _family(spec, ["device", "port"])
        for reading in snapshot.ports:
            value = reading.values.get(spec.key)
            if value is not None:
                family.add_metric([reading.port.device, str(reading.port.port)], value * spec.prom_scale)
        if family.samples:
            yield family


class Exposition:
    """Serves rendered bytes, rendering each snapshot at most once per format."""

    def __init__(self, identity: ExporterIdentity, latest: LatestSnapshot, dcgm_compat: bool = False) -> None:
        self._latest = latest
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(SnapshotCollector(identity, latest, dcgm_compat))
        self._cache: dict[str, tuple[object, bytes]] = {}
        self._lock = threading.Lock()

    def render(self, accept_header: str | None) -> tuple[bytes, str]:
        encoder, content_type = choose_encoder(accept_header or "")
        snapshot = self._latest()
        with self._lock:
            cached = self._cache.get(content_type)
            if cached is not None and cached[0] is snapshot and snapshot is not None:
                return cached[1], content_type
            body = encoder(self._registry)
            self._cache[content_type] = (snapshot, body)
        return body, content_type
