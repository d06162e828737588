"""dcgm-exporter's metric and label names (--dcgm-compat), so dashboards built for it (Grafana 12239) work.

Values use DCGM's units (MHz, °C, W, mJ, MiB, µs). dcgm-exporter writes counters without the
`_total` suffix, which the exposition formats reserve for counters, so its counters are exposed as
gauges under their DCGM names: PromQL (rate, increase) treats them the same. DCGM_FI_DEV_XID_ERRORS
(a last-value gauge in dcgm-exporter) is left out: gpuscope counts XIDs per code instead.

A GPU in MIG mode reports memory and activity per GPU instance, labelled GPU_I_ID and GPU_I_PROFILE as
dcgm-exporter does, in place of its GPU-wide figure for the same field (so sums do not count it twice);
its power, temperature and clocks stay GPU-wide.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuscope.exporter.catalog import metrics_for
from gpuscope.exporter.snapshot import GpuReading, MigReading, Snapshot
from gpuscope.exporter.textformat import Family, label_block

LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"]
MIG_LABELS = [*LABELS, "GPU_I_PROFILE", "GPU_I_ID"]
MIB = 2**20


def dcgm_families(snapshot: Snapshot, hostname: str) -> Iterator[Family]:
    up_gpus = [(r, _labels(r, hostname)) for r in snapshot.gpus if r.up]
    instances = [(m, _mig_labels(r, m, hostname)) for r in snapshot.gpus if r.up for m in r.mig]
    per_instance = {spec.dcgm_name: spec for spec in metrics_for("mig") if spec.dcgm_name}
    for spec in metrics_for("gpu"):
        if spec.dcgm_name is None or spec.dcgm_scale is None:
            continue
        family = Family(spec.dcgm_name, "gauge", f"{spec.help} (dcgm-exporter compatible)")
        instance_spec = per_instance.get(spec.dcgm_name)
        for reading, labels in up_gpus:
            value = reading.values.get(spec.key)
            if value is not None and not (reading.mig and instance_spec):
                family.add(labels, value * spec.dcgm_scale)
        if instance_spec is not None and instance_spec.dcgm_scale is not None:
            for mig, labels in instances:
                value = mig.values.get(instance_spec.key)
                if value is not None:
                    family.add(labels, value * instance_spec.dcgm_scale)
        yield family
    free = Family("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free in MiB (dcgm-exporter compatible)")
    for reading, labels in up_gpus:
        total, used = reading.values.get("fb_total_bytes"), reading.values.get("fb_used_bytes")
        if total is not None and used is not None and not reading.mig:
            free.add(labels, (total - used) / MIB)
    for mig, labels in instances:
        total, used = mig.values.get("mig_fb_total_bytes"), mig.values.get("mig_fb_used_bytes")
        if total is not None and used is not None:
            free.add(labels, (total - used) / MIB)
    yield free


def _labels(reading: GpuReading, hostname: str) -> str:
    gpu = reading.gpu
    return label_block(LABELS, [str(gpu.index), gpu.uuid, gpu.pci_bus_id, f"nvidia{gpu.index}", gpu.model, hostname])


def _mig_labels(reading: GpuReading, mig: MigReading, hostname: str) -> str:
    gpu = reading.gpu
    values = [str(gpu.index), gpu.uuid, gpu.pci_bus_id, f"nvidia{gpu.index}", gpu.model, hostname]
    return label_block(MIG_LABELS, [*values, mig.profile, str(mig.gpu_instance_id)])
