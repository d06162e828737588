"""How a fault enters a family's step model, and its record: what the families inject the same way.

A family's fault is a kind on a place (`where`: node first, then the GPU or the port) at an intensity x
in [0, 1] (`_common.pick_fault` calibrates x). The mechanisms written here once:
- a GPU fault (thermal, power_cap, and a family's own GPU kinds) changes the electrical state of one rank;
- slow_host: the node's CPUs launch late (contention, throttling), so each of its GPUs gets an extra host
  gap before every launch, up to twice the clean step at x = 1 over a step's launch gaps, some GPUs of the
  node a little less than others (a fixed spread per node and job);
- slow_nic: a link trained at a lower rate (a discrete share of its rate, both ways: `DOWNTRAINED`) or a
  congested port (any intensity: its egress keeps 1 - 0.9 x of the link rate, its trained rate unchanged);
- gpu_degraded as memory stalls where a family models it so (`memory_stalls`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuscope.bench.workloads._common import Choice
from gpuscope.bench.workloads._engine import Fault
from gpuscope.bench.workloads._gpu import Electrical, Fleet, electrical

DOWNTRAINED = (0.5, 0.25)  # NDR 400 trained at HDR 200, or at 1x width: 100 Gb/s
GPU_KINDS = ("thermal", "power_cap", "gpu_degraded", "nvlink")  # faults whose record names the GPU
ElectricalOf = Callable[[str | None, int | None, float], Electrical]  # (kind, rank, x); (None, None, 0): clean


def nic_modes(rng: np.random.Generator) -> Callable[[str], list[tuple[str, list[float] | None]]]:
    """The ways a fault kind can happen, in the order pick_fault tries them: a slow NIC is a link trained
    at a lower rate (discrete settings) or a congested port (any intensity), in random order."""

    def modes(kind: str) -> list[tuple[str, list[float] | None]]:
        if kind == "slow_nic":
            m: list[tuple[str, list[float] | None]] = [("downtrained", list(DOWNTRAINED)), ("congested", None)]
            return m if rng.random() < 0.5 else m[::-1]
        return [("", None)]

    return modes


def host_gaps(ranks: int, gpn: int, node: int, key: int, x: float, clean_s: float, gaps: int) -> np.ndarray:
    """(R,) extra host seconds per launch gap on `node`'s GPUs: x * 2 clean steps over a step's `gaps`
    launch gaps, spread per GPU by a draw keyed on (node, key) so it is the same at every intensity."""
    u = np.random.default_rng([node, key]).uniform(0.7, 1.0, gpn)
    u[np.argmax(u)] = 1.0
    extra = np.zeros(ranks)
    extra[node * gpn : (node + 1) * gpn] = x * 2.0 * clean_s / gaps * u
    return extra


def nic_shares(ports: int, port: int, x: float, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """(P,) egress rate and trained link rate of every port as shares of nominal, `port` slowed."""
    tx, rx = np.ones(ports), np.ones(ports)
    if mode == "downtrained":
        tx[port] = rx[port] = x
    else:
        tx[port] = 1.0 - 0.9 * x
    return tx, rx


def memory_stalls(fleet: Fleet, rank: int, x: float) -> tuple[Fleet, np.ndarray, str]:
    """A GPU whose kernels stall on memory (HBM row remapping), 1 + 3x slower at normal clocks: the same
    tensor work spread over longer, less switching per second. Returns the fleet as it then reads, the
    (R,) compute time multiplier and the record's detail."""
    slower = 1.0 + 3.0 * x
    demand, tensor = fleet.demand.copy(), fleet.tensor.copy()
    demand[rank] *= slower**-0.6
    tensor[rank] /= slower
    fault_fleet = dataclasses.replace(fleet, demand=demand, tensor=tensor)
    deg = np.ones(fleet.ranks)
    deg[rank] = slower
    return fault_fleet, deg, f"memory stalls (HBM row remapping): compute {slower:.2f}x slower at normal clocks"


@dataclass
class Inputs:
    """What a fault changes in a step model's inputs (None: nothing)."""

    elec: Electrical
    host_extra: np.ndarray | None = None  # (R,) extra host gap per launch
    tx: np.ndarray | None = None  # (P,) egress rate of each port, share of nominal
    rx: np.ndarray | None = None  # (P,) trained link rate of each port, share of nominal


@dataclass
class StepModel:
    """What rank_fault needs to know of a family's step model."""

    fleet: Fleet
    ports: int
    clean_s: Callable[[Electrical], float]  # the clean step's seconds at an electrical state
    host_key: int  # keys each node's spread of a slow host's gaps (see host_gaps)
    gaps: int  # launch gaps per step
    electrical_of: ElectricalOf | None = None  # the fleet's electrical model; None: `_gpu.electrical`


def rank_fault(kind: str, where: tuple[int, ...], x: float, mode: str, model: StepModel) -> Inputs:
    """The inputs of a fault on a GPU (where = node, gpu), a host (node) or a port (node, port)."""
    fleet = model.fleet
    elec_of = model.electrical_of or functools.partial(electrical, fleet)
    gpn = fleet.gpus_per_node
    if kind not in ("slow_host", "slow_nic"):
        node, gpu = where
        return Inputs(elec_of(kind, node * gpn + gpu, x))
    elec = elec_of(None, None, 0.0)
    if kind == "slow_host":
        extra = host_gaps(fleet.ranks, gpn, where[0], model.host_key, x, model.clean_s(elec), model.gaps)
        return Inputs(elec, host_extra=extra)
    tx, rx = nic_shares(model.ports, where[1], x, mode)
    return Inputs(elec, tx=tx, rx=rx)


def record(
    rng: np.random.Generator,
    choice: Choice,
    gpn: int,
    elec: Electrical,
    window: tuple[float, float],
    target: float,
    detail: str,
    localisable: bool = True,
) -> Fault:
    """The job's fault from the chosen one: where it is, when, and (drawn in this order) the temperature a
    thermal fault holds its die at and how long it rises before the clocks drop."""
    node = choice.where[0]
    thermal_c = np.nan
    if choice.kind == "thermal":
        thermal_c = (86.0 if elec.hw_duty[node * gpn + choice.where[1]] == 0 else 91.0) + float(rng.uniform(-2, 2))
    return Fault(
        kind=choice.kind,
        node=node,
        gpu=choice.where[1] if choice.kind in GPU_KINDS else None,
        port=choice.where[1] if choice.kind == "slow_nic" else None,
        onset_s=window[0],
        end_s=window[1],
        target=target,
        localisable=localisable,
        detail=detail,
        rate_factor=choice.x if choice.mode == "downtrained" else 1.0,
        ramp_s=float(rng.uniform(60, 300)),
        thermal_c=thermal_c,
    )


def nic_detail(rate_gbps: np.ndarray, port: int, x: float, mode: str) -> str:
    """The record's words for a slow port, where the family calls a congested port credit-stalled."""
    if mode == "downtrained":
        return f"link trained at {rate_gbps[port] * x:.0f} Gb/s instead of {rate_gbps[port]:.0f}"
    return f"credit-stalled port (receiver back-pressure), {1.0 - 0.9 * x:.0%} of its egress"
