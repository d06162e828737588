"""dcgm-exporter's metric and label names (--dcgm-compat), so dashboards built for it (Grafana 12239) work.

Values use DCGM's units (MHz, °C, W, mJ, MiB, µs). dcgm-exporter writes counters without the
`_total` suffix, which a conforming Prometheus client cannot do, so counters are exposed as gauges
under their DCGM names: PromQL (rate, increase) treats them the same. DCGM_FI_DEV_XID_ERRORS (a
last-value gauge in dcgm-exporter) is left out: gpuscope counts XIDs per code instead.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric

from exporter.catalog import metrics_for
from exporter.snapshot import GpuReading, Snapshot

LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"]
MIB = 2**20


def dcgm_families(snapshot: Snapshot, hostname: str) -> Iterable[Metric]:
    up_gpus = [r for r in snapshot.gpus if r.up]
    for spec in metrics_for("gpu"):
        if spec.dcgm_name is None or spec.dcgm_scale is None:
            continue
        family = GaugeMetricFamily(spec.dcgm_name, f"{spec.help} (dcgm-exporter compatible)", labels=LABELS)
        for reading in up_gpus:
            value = reading.values.get(spec.key)
            if value is not None:
                family.add_metric(_labels(reading, hostname), value * spec.dcgm_scale)
        if family.samples:
            yield family
    free = GaugeMetricFamily("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free in MiB (dcgm-exporter compatible)", labels=LABELS)
    for reading in up_gpus:
        total, used = reading.values.get("fb_total_bytes"), reading.values.get("fb_used_bytes")
        if total is not None and used is not None:
            free.add_metric(_labels(reading, hostname), (total - used) / MIB)
    if free.samples:
        yield free


def _labels(reading: GpuReading, hostname: str) -> list[str]:
    gpu = reading.gpu
    return [str(gpu.index), gpu.uuid, gpu.pci_bus_id, f"nvidia{gpu.index}", gpu.model, hostname]
