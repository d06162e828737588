"""Row remapping (NVIDIA A100 and later): a remap pending, or a remap failed.

What: gpu_sample.remap_pending and remap_failure, NVML's nvmlDeviceGetRemappedRows flags, turning 1 (the
first sample of a GPU in reach counts as turning). Threshold: the flag set.
Pending: suspect, action reset_gpu. NVIDIA: the remap takes effect at the next GPU reset, and until then
work continues unaffected (error containment and page blacklisting cover the row); so watch, and reset
when the GPU is free (NVIDIA GPU Memory Error Management, "Error Recovery and Response Flags").
Failed: unhealthy, action drain_rma. NVIDIA's RMA policy: a remap failure (a bank out of spare rows,
a row remapped twice, or 512 remaps) meets the RMA criterion once the field diagnostic confirms it;
the flag stays set for the GPU's life, so a GPU seen anew with it is reported anew.
AMD: amdsmi's bad-page list is the equivalent; gpuscope does not store it (its exporter reads totals only).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuscope.health.model import Evidence, Severity
from gpuscope.health.rules.gpu_steps import GpuStep
from gpuscope.health.rules.places import GpuPlace

PENDING, FAILED = "remap_pending", "remap_failed"


def remap_evidence(steps: Sequence[GpuStep], places: dict[int, GpuPlace]) -> list[Evidence]:
    found = []
    for step in steps:
        place = places.get(step.gpu_id)
        if place is None:
            continue
        gpu = f"GPU {place.gpu_index}"
        if step.remap_pending_set:
            detail = f"row remap pending on {gpu}: it takes effect at the GPU's next reset"
            found.append(_evidence(step, place, PENDING, Severity.SUSPECT, detail, "reset_gpu"))
        if step.remap_failure_set:
            detail = f"row remap failed on {gpu}: no spare rows left, NVIDIA's criterion for a return (RMA)"
            found.append(_evidence(step, place, FAILED, Severity.UNHEALTHY, detail, "drain_rma"))
    return found


def _evidence(step: GpuStep, place: GpuPlace, kind: str, severity: Severity, detail: str, action: str) -> Evidence:
    return Evidence(step.at, place.node_id, step.gpu_id, kind, severity, detail, None, action, place.gpu_index)
