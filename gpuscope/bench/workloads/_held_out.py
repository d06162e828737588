"""What the held-out families share: a 5-30 s scrape interval, and (neighbour, nvlink, elastic) a GPU
that is slower at normal clocks (gpu_degraded).

gpu_degraded. HBM trouble (a pending row remap, ECC retries, a stack running hot enough to stretch its
refresh) or a PCIe link trained down makes one GPU's kernels stall on memory: the same work takes
`factor` times as long at the SAME clock, with no clock-event reason. Tensor pipes do the same number of
active cycles per step as on a healthy GPU, over more elapsed cycles: the stretch reads as its own
activity (warps waiting on memory: some SMs active, tensor pipes idle, utilisation 100%), drawn as the
`light` activity, at the power of a memory-bound kernel (a third of the dense-compute dynamic power),
with the clock up and no power-cap reason (the GPU draws less, so it is no longer at its limit).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gpuscope.bench.workloads._engine import StepPlan, sample_grid
from gpuscope.bench.workloads._gpu import COMPUTE, LIGHT, Electrical, Fleet, electrical

SCRAPE_S = (5.0, 10.0, 15.0, 20.0, 30.0)
DEGRADED_MAX = 2.0  # at x = 1 the GPU's kernels take 1 + 2 = 3x as long


def scrape_interval(rng: np.random.Generator, ranks: int, duration_s: float) -> float:
    """A 5-30 s scrape interval, lengthened for big jobs so a case stays within MAX_RANK_SAMPLES."""
    return sample_grid(rng, ranks, duration_s, SCRAPE_S)


def degraded_factor(x: float) -> float:
    return 1.0 + DEGRADED_MAX * x


def degraded_fleet(fleet: Fleet, rank: int, x: float) -> Fleet:
    """The fleet with `rank` computing degraded_factor(x) times slower at the same clock."""
    het = fleet.het.copy()
    het[rank] *= degraded_factor(x)
    return dataclasses.replace(fleet, het=het)


def degraded_electrical(fleet: Fleet, rank: int, x: float) -> Electrical:
    elec = electrical(fleet)
    p_act = elec.p_act.copy()
    p_act[LIGHT, rank] = fleet.p_up[rank] + 0.33 * fleet.demand[rank] * (elec.f_compute[rank] / fleet.kind.fmax) ** (
        fleet.gamma
    )
    factor = degraded_factor(x)
    detail = f"kernels {factor:.2f}x slower at normal clocks (memory stalls), no throttle reason"
    return dataclasses.replace(elec, p_act=p_act, detail=detail)


def stall_compute(p: StepPlan, rank: int, x: float) -> StepPlan:
    """Split `rank`'s (already stretched) compute into the work (1/factor of it) and the memory stalls."""
    comp = p.comp.copy()
    moved = comp[:, rank, COMPUTE] * (1.0 - 1.0 / degraded_factor(x))
    comp[:, rank, COMPUTE] -= moved
    comp[:, rank, LIGHT] += moved
    return dataclasses.replace(p, comp=comp)
