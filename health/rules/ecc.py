"""Uncorrectable ECC errors: the GPU's volatile uncorrectable ECC count rose.

What: gpu_sample.ecc_uncorrected (NVML's volatile total on NVIDIA, amdsmi's uncorrectable count on AMD)
higher than at the GPU's sample before; a drop to a lower value is the count restarting after a driver
reload or GPU reset, never errors taken back, and only what it holds since counts (gpu_steps.py).
Threshold: one error. Severity unhealthy, action reset_gpu. Why: an uncorrectable error is XID 48, which
NVIDIA's catalogue answers with a GPU reset (or node reboot) before the GPU is trusted again and a field
diagnostic when it recurs; error containment (A100 and later) spares the other applications, not the
memory. It is not suspect, for on AMD GPUs the count is the only uncorrectable signal gpuscope stores.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuscope.health.model import Evidence, Severity
from gpuscope.health.rules.gpu_steps import GpuStep
from gpuscope.health.rules.places import GpuPlace

KIND = "ecc_uncorrectable"
ACTION = "reset_gpu"


def ecc_evidence(steps: Sequence[GpuStep], places: dict[int, GpuPlace]) -> list[Evidence]:
    found = []
    for step in steps:
        place = places.get(step.gpu_id)
        if step.ecc_rise <= 0 or place is None:
            continue
        errors = "1 uncorrectable ECC error" if step.ecc_rise == 1 else f"{step.ecc_rise} uncorrectable ECC errors"
        detail = f"{errors} on GPU {place.gpu_index} ({step.ecc_now} since the driver loaded)"
        found.append(
            Evidence(
                at=step.at,
                node_id=place.node_id,
                gpu_id=step.gpu_id,
                kind=KIND,
                severity=Severity.UNHEALTHY,
                detail=detail,
                action=ACTION,
                gpu_index=place.gpu_index,
            )
        )
    return found
