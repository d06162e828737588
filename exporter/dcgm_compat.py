"""dcgm-exporter's metric and label names (--dcgm-compat), so its dashboards (its own and Grafana 12239),
recording rules and alerts work on a gpuscope scrape, beside gpuscope's own names.

What dcgm-exporter serves by default (etc/default-counters.csv) is here with its types and units
(MHz, °C, W, mJ, MiB, %, ratios, ns), plus the error counters of its commented-out list that gpuscope
reads. Counters are typed counter and named without `_total`, as dcgm-exporter names them: the text
format allows that, OpenMetrics does not, so a scrape with these names is always served as text.

Labels, in dcgm-exporter's order: gpu, UUID, pci_bus_id, device, modelName, GPU_I_PROFILE and GPU_I_ID
(MIG), Hostname and hostname (dcgm-exporter renamed the first to the second in 2026; dashboards of
either age work), hpc_job (where job attribution maps the GPU, as its HPC job mapping does), and
DCGM_FI_DRIVER_VERSION. A GPU in MIG mode reports memory and activity per GPU instance in place of
its GPU-wide figure for the same field (so sums do not count it twice); power, temperature and clocks
stay GPU-wide.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuscope.core.xid_messages import xid_message
from gpuscope.exporter.catalog import MetricSpec, metrics_for
from gpuscope.exporter.snapshot import UNKNOWN_XID, GpuReading, JobInfo, MigReading, Snapshot
from gpuscope.exporter.textformat import Family, label_block

GPU_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName"]
MIG_LABELS = ["GPU_I_PROFILE", "GPU_I_ID"]
MIB = 2**20
NVML_UNKNOWN_XID = 999  # what the driver reports for an XID it could not identify (gpuscope counts it as 0)
# DCGM renamed the bitmask; dcgm-exporter's current lists use the new name, older dashboards the old
CLOCK_EVENT_NAMES = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")


def dcgm_families(snapshot: Snapshot, hostname: str) -> Iterator[Family]:
    labeller = _Labeller(snapshot, hostname)
    up = [(r, labeller.gpu(r)) for r in snapshot.gpus if r.up]
    instances = [(m, labeller.instance(r, m)) for r in snapshot.gpus if r.up for m in r.mig]
    per_instance = {spec.dcgm_name: spec for spec in metrics_for("mig") if spec.dcgm_name}
    for spec in metrics_for("gpu"):
        if spec.dcgm_name is None or spec.dcgm_scale is None:
            continue
        instance_spec = per_instance.get(spec.dcgm_name)
        for name in CLOCK_EVENT_NAMES if spec.key == "clock_event_reasons" else (spec.dcgm_name,):
            yield _gpu_family(name, spec, instance_spec, up, instances)
    yield _fb_free(up, instances)
    yield _last_xid(up)
    yield _nvlink_bandwidth(up)


def _gpu_family(
    name: str,
    spec: MetricSpec,
    instance_spec: MetricSpec | None,
    up: list[tuple[GpuReading, str]],
    instances: list[tuple[MigReading, str]],
) -> Family:
    """One field for every GPU; for a GPU in MIG mode, per GPU instance where the field has an instance
    figure (`instance_spec`), in place of the GPU-wide one."""
    family = Family(name, spec.type, f"{spec.help} (dcgm-exporter compatible)", total_suffix=False)
    for reading, labels in up:
        value = reading.values.get(spec.key)
        if value is not None and spec.dcgm_scale is not None and not (reading.mig and instance_spec):
            family.add(labels, value * spec.dcgm_scale)
    if instance_spec is not None and instance_spec.dcgm_scale is not None:
        for mig, labels in instances:
            value = mig.values.get(instance_spec.key)
            if value is not None:
                family.add(labels, value * instance_spec.dcgm_scale)
    return family


def _fb_free(up: list[tuple[GpuReading, str]], instances: list[tuple[MigReading, str]]) -> Family:
    free = Family("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free in MiB (dcgm-exporter compatible)")
    for reading, labels in up:
        total, used = reading.values.get("fb_total_bytes"), reading.values.get("fb_used_bytes")
        if total is not None and used is not None and not reading.mig:
            reserved = reading.values.get("fb_reserved_bytes", 0.0)  # DCGM: free = total - used - reserved
            free.add(labels, max(0.0, total - used - reserved) / MIB)
    for mig, labels in instances:
        total, used = mig.values.get("mig_fb_total_bytes"), mig.values.get("mig_fb_used_bytes")
        if total is not None and used is not None:
            free.add(labels, (total - used) / MIB)
    return free


def _last_xid(up: list[tuple[GpuReading, str]]) -> Family:
    """DCGM's XID field holds the last XID seen (0: none yet), labelled with its code and NVIDIA's text
    for it as dcgm-exporter does; gpuscope's counts keep the order codes were last seen in."""
    family = Family(
        "DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered (dcgm-exporter compatible)"
    )
    for reading, labels in up:
        last = next(reversed(reading.xid_counts), None)
        code = 0 if last is None else NVML_UNKNOWN_XID if last == UNKNOWN_XID else last
        error = label_block(["err_code", "err_msg"], [str(code), xid_message(code)])
        family.add(f"{labels[:-1]},{error[1:]}", code)
    return family


def _nvlink_bandwidth(up: list[tuple[GpuReading, str]]) -> Family:
    family = Family(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "NVLink bytes sent and received over all links (dcgm-exporter compatible)",
        total_suffix=False,
    )
    for reading, labels in up:
        tx, rx = reading.values.get("nvlink_tx_bytes"), reading.values.get("nvlink_rx_bytes")
        if tx is not None and rx is not None:
            family.add(labels, tx + rx)
    return family


class _Labeller:
    """Label blocks as dcgm-exporter writes them, built once per GPU and MIG instance each scrape."""

    def __init__(self, snapshot: Snapshot, hostname: str) -> None:
        self._snapshot = snapshot
        self._hostname = hostname

    def gpu(self, reading: GpuReading) -> str:
        job = (self._snapshot.jobs or {}).get(reading.gpu.index)
        return self._block(reading, [], [], job)

    def instance(self, reading: GpuReading, mig: MigReading) -> str:
        job = (self._snapshot.mig_jobs or {}).get(mig.uuid) or (self._snapshot.jobs or {}).get(reading.gpu.index)
        return self._block(reading, MIG_LABELS, [mig.profile, str(mig.gpu_instance_id)], job)

    def _block(self, reading: GpuReading, extra_names: list[str], extra: list[str], job: JobInfo | None) -> str:
        gpu = reading.gpu
        names = [*GPU_LABELS, *extra_names, "Hostname", "hostname"]
        values = [str(gpu.index), gpu.uuid, gpu.pci_bus_id, f"nvidia{gpu.index}", gpu.model, *extra]
        values += [self._hostname, self._hostname]
        if job is not None and job.pod is not None:  # Kubernetes: the pod's labels, as dcgm-exporter's
            names += ["pod", "namespace", "container"]
            values += [job.pod, job.namespace or "", job.container or ""]
        elif job is not None:  # a batch scheduler's job: dcgm-exporter's HPC job mapping label
            names.append("hpc_job")
            values.append(job.job_id)
        if self._snapshot.driver_version:
            names.append("DCGM_FI_DRIVER_VERSION")
            values.append(self._snapshot.driver_version)
        return label_block(names, values)
