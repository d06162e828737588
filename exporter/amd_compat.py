"""AMD device-metrics-exporter's metric and label names (--amd-compat), so AMD's Grafana dashboards work.

Names, units and labels follow github.com/ROCm/device-metrics-exporter (commit afd0fe81); the table of
what is served is exporter/amd_names.py, docs/migrating-from-amd-exporter.md explains it. Values keep
AMD's units: percent 0-100, W, uJ, degrees C, MHz, MB (MiB), KB (KiB). A value gpuscope does not have
for a GPU is left out, never written as 0.

Labels on every per-GPU sample: gpu_id (gpuscope's index), gpu_uuid (gpuscope's UUID: a partition's
ends in :pN), gpu_partition_id (N for a partition, "NA" for a whole GPU, as AMD's exporter writes it
outside partitioned mode), serial_number, card_model (the board's part number, e.g. 102-G30211-00, as
AMD's exporter writes it and its dashboards match on; the model name where the board gives none),
driver_version, hostname, job_id and job_user (from job attribution, "" without a job), pod, namespace
and container (from Kubernetes attribution, "" elsewhere). gpu_clock adds clock_type
(system, memory) and the XGMI families link_index. gpu_nodes_total is labelled by hostname only and
counts every GPU (partition) the exporter reads, down ones included, as AMD's counts the GPUs its agent
lists; a GPU that is down has no other sample.

AMD's exporter writes every family as a gauge. gpu_ecc_correct_total and gpu_ecc_uncorrect_total are
counters here (same sample names). gpu_nodes_total and pcie_replay_count stay gauges under AMD's names,
the two things `promtool check metrics` reports (a gauge ending in _total, one ending in _count).

Absent: AMD's exporter has these families, gpuscope has no value for them.
  gpu_health: AMD's verdict from ECC thresholds, critical events and CPER records; gpuscope has none.
  gpu_average_package_power: gpuscope keeps one socket power reading (served as the current one),
    not whether amdsmi gave it as an average.
  gpu_edge_temperature gpu_hbm_temperature: gpuscope reads the hotspot and VRAM sensors only.
  gpu_gfx_busy_instantaneous gpu_vcn_busy_instantaneous gpu_jpeg_busy_instantaneous (per XCC)
    gpu_mma_activity gpu_vcn_activity gpu_jpeg_activity: not read (the averaged GFX activity is served).
  gpu_voltage gpu_gfx_voltage gpu_memory_voltage gpu_min_clock gpu_max_clock: not read.
  pcie_speed pcie_max_speed pcie_bandwidth pcie_recovery_count pcie_replay_rollover_count
    pcie_nack_sent_count pcie_nack_received_count pcie_rx pcie_tx pcie_bidirectional_bandwidth:
    gpuscope reads only the replay counter from an AMD GPU.
  gpu_free_visible_vram gpu_total_visible_vram gpu_used_visible_vram gpu_total_gtt gpu_used_gtt
    gpu_free_gtt gpu_vram_max_bandwidth: not read.
  gpu_ecc_deferred_total and the per-block gpu_ecc_{correct,uncorrect,deferred}_<block> (sdma, gfx,
    mmhub, athub, bif, hdp, xgmi_wafl, df, smn, sem, mp0, mp1, fuse, umc, mca, vcn, jpeg, ih, mpio):
    gpuscope keeps the correctable and uncorrectable totals only.
  gpu_xgmi_nbr_<n>_{nop,req,resp,beats}_tx gpu_xgmi_nbr_<n>_tx_thrput: not read (per-link data is served).
  gpu_violation_* (throttle residency counters and percentages), gpu_afid_errors,
    gpu_process_cu_occupancy: not read.
  gpu_prof_* (profiler counters, among them gpu_prof_sm_active gpu_prof_occupancy_per_cu
    gpu_prof_occupancy_per_active_cu gpu_prof_simd_utilization gpu_prof_tensor_active_percent
    gpu_prof_gui_util_percent): gpuscope runs no profiler on AMD GPUs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from gpuscope.exporter.amd_names import GPU_NAMES, LINK_NAMES, MIB
from gpuscope.exporter.snapshot import GpuReading, Snapshot
from gpuscope.exporter.textformat import Family, label_block

LABELS = [
    "gpu_id",
    "gpu_uuid",
    "gpu_partition_id",
    "serial_number",
    "card_model",
    "driver_version",
    "hostname",
    "job_id",
    "job_user",
    "pod",
    "namespace",
    "container",
]
COMPATIBLE = " (AMD device-metrics-exporter compatible)"
_PARTITION = re.compile(r".*:p(\d+)")  # the AMD backend's partition suffix on the GPU's UUID


def amd_families(snapshot: Snapshot, hostname: str) -> Iterator[Family]:
    up_gpus = [(r, _labels(snapshot, r, hostname)) for r in snapshot.gpus if r.up]
    families: dict[str, Family] = {}
    for row in GPU_NAMES:
        family = families.setdefault(row.name, Family(row.name, row.type, row.help + COMPATIBLE))
        names, fixed = [name for name, _ in row.labels], [value for _, value in row.labels]
        for reading, labels in up_gpus:
            value = reading.values.get(row.key)
            if value is not None:
                family.add(_extend(labels, names, fixed), value * row.scale)
    yield from families.values()
    free = Family("gpu_free_vram", "gauge", "VRAM free in MB (MiB)" + COMPATIBLE)
    for reading, labels in up_gpus:
        total, used = reading.values.get("fb_total_bytes"), reading.values.get("fb_used_bytes")
        if total is not None and used is not None:
            free.add(labels, (total - used) / MIB)
    yield free
    for row in LINK_NAMES:
        family = Family(row.name, row.type, row.help + COMPATIBLE)
        for reading, labels in up_gpus:
            for link, link_values in sorted(reading.links.items()):
                value = link_values.get(row.key)
                if value is not None:
                    family.add(_extend(labels, ["link_index"], [str(link)]), value * row.scale)
        yield family
    nodes = Family("gpu_nodes_total", "gauge", "GPUs (partitions) on the node, down ones included" + COMPATIBLE)
    nodes.add(label_block(["hostname"], [hostname]), len(snapshot.gpus))
    yield nodes


def _labels(snapshot: Snapshot, reading: GpuReading, hostname: str) -> str:
    gpu = reading.gpu
    job = (snapshot.jobs or {}).get(gpu.index)
    partition = _PARTITION.fullmatch(gpu.uuid)
    values = [
        str(gpu.index),
        gpu.uuid,
        partition[1] if partition else "NA",
        gpu.serial,
        gpu.part_number or gpu.model,
        snapshot.driver_version,
        hostname,
        job.job_id if job else "",
        (job.user or "") if job else "",
        (job.pod or "") if job else "",  # Kubernetes attribution (--jobs k8s); "" for batch jobs
        (job.namespace or "") if job else "",
        (job.container or "") if job else "",
    ]
    return label_block(LABELS, values)


def _extend(labels: str, names: Sequence[str], values: Sequence[str]) -> str:
    """A label block with more labels after the GPU's."""
    if not names:
        return labels
    return labels[:-1] + "," + label_block(names, values)[1:]
