"""A GPU as an electrical and thermal object: what sets its clock, its power and its temperature.

Power. A kernel's power is a static part (leakage, memory, fans of the board: `p_up` with clocks up,
`p_deep` when the GPU has been idle long enough to drop its clocks) plus a dynamic part that grows as
f**gamma (voltage rises with frequency, gamma 2.2-2.8). Dense GEMM work asks for `demand` watts of
dynamic power at the top clock; when p_up + demand exceeds the enforced limit, the driver lowers the
clock until it fits and raises the SW power-cap reason (0x4). Training GPUs near their limit do this
while healthy, some more than others (leakage varies from die to die by a few percent).

Speed. Only part of a step's compute is clock-bound (`alpha`, 0.6-0.9); memory-bound kernels do not
care. Relative speed at clock f is 1 / (alpha * fmax / f + 1 - alpha).

Heat. The die sits `r_th` kelvin per watt above its inlet air with a time constant of tens of seconds;
slots downstream in the chassis airflow run hotter.

Faults act on this model:
- power_cap: the enforced limit of one GPU drops (a wrong `nvidia-smi -pl`, a power-management policy);
  its clock falls until compute power fits, power reads pinned at the limit while computing, it runs
  cooler, the 0x4 reason stays set while it computes.
- thermal: one GPU cannot shed its heat (fan, heatsink, blocked airflow). Mild: the driver's software
  thermal control holds the die at its slowdown temperature by lowering the clock (0x20, clock steady,
  power lower). Severe: the hardware slowdown asserts in bursts and cuts the clock to about a third while asserted
  (0x40 with 0x8, clock samples bimodal, the reason present in only a share of samples).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# activities a GPU can be in, the columns of every composition
IDLE, COMPUTE, SPIN, XFER, DEEP, LIGHT = range(6)
N_ACT = 6
ACT_NAMES = ("idle", "compute", "spin", "xfer", "deep_idle", "light")

GPU_IDLE_BIT = 0x1
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL = 0x20
HW_THERMAL = 0x40


@dataclass(frozen=True)
class GpuType:
    name: str
    fmax: float  # MHz, top boost clock
    fidle: float  # MHz after idling a while
    limit_w: float  # default enforced power limit
    min_limit_w: float  # the lowest limit the board accepts
    deep_w: float  # idle power with clocks down


H100 = GpuType("H100-SXM", 1980.0, 345.0, 700.0, 200.0, 70.0)
A100 = GpuType("A100-SXM", 1410.0, 210.0, 400.0, 100.0, 55.0)


def speed(f: np.ndarray | float, fmax: float, alpha: float) -> np.ndarray:
    return 1.0 / (alpha * fmax / np.asarray(f, dtype=float) + 1.0 - alpha)


@dataclass
class Fleet:
    """The static properties of every GPU of a job, drawn once per seed."""

    kind: GpuType
    ranks: int
    gpus_per_node: int
    alpha: float
    gamma: float
    demand: np.ndarray  # (R,) dynamic watts dense compute asks for at fmax
    p_up: np.ndarray  # (R,) static power with clocks up
    p_spin: np.ndarray
    p_xfer: np.ndarray
    p_light: np.ndarray
    p_deep: np.ndarray
    tensor: np.ndarray  # (R,) tensor-pipe activity while computing (0-1)
    sm_compute: np.ndarray  # (R,) SM activity while computing
    sm_nccl: float  # SM activity of NCCL kernels (their channels occupy a few SMs)
    sm_light: float
    tensor_light: float
    r_th: np.ndarray  # (R,) K/W
    t_inlet: np.ndarray  # (R,) deg C
    tau_th: float  # s
    het: np.ndarray  # (R,) compute time multiplier apart from clocks (memory, placement), ~1


def draw_fleet(rng: np.random.Generator, nodes: int, gpus_per_node: int, kind: GpuType | None = None) -> Fleet:
    ranks = nodes * gpus_per_node
    kind = kind or (H100 if rng.random() < 0.8 else A100)
    scale = kind.limit_w / 700.0
    leak = np.clip(rng.normal(1.0, 0.025, ranks), 0.93, 1.07)
    p_up = (kind.deep_w + rng.uniform(30, 50) * scale) * leak
    intensity = rng.uniform(0.8, 1.08)  # > 1: dense compute hits the power limit on a typical die
    demand = (kind.limit_w - p_up.mean()) * intensity * leak * rng.normal(1.0, 0.01, ranks)
    slot = np.tile(np.linspace(0.0, 1.0, gpus_per_node), nodes)  # downstream in the chassis airflow
    t_inlet = np.repeat(rng.uniform(20.0, 32.0, nodes), gpus_per_node) + 5.0 * slot
    return Fleet(
        kind=kind,
        ranks=ranks,
        gpus_per_node=gpus_per_node,
        alpha=float(rng.uniform(0.6, 0.9)),
        gamma=float(rng.uniform(2.2, 2.8)),
        demand=demand,
        p_up=p_up,
        p_spin=p_up + rng.uniform(50, 110) * scale * leak,
        p_xfer=p_up + rng.uniform(80, 150) * scale * leak,
        p_light=p_up + rng.uniform(30, 80) * scale * leak,
        p_deep=kind.deep_w * leak,
        tensor=np.clip(rng.uniform(0.25, 0.65) * rng.normal(1.0, 0.02, ranks), 0.05, 0.95),
        sm_compute=np.clip(rng.uniform(0.8, 0.97) * rng.normal(1.0, 0.01, ranks), 0.5, 1.0),
        sm_nccl=float(rng.uniform(0.06, 0.25)),
        sm_light=float(rng.uniform(0.1, 0.35)),
        tensor_light=float(rng.uniform(0.0, 0.05)),
        r_th=rng.uniform(0.05, 0.065) * rng.normal(1.0, 0.04, ranks) / scale,
        t_inlet=t_inlet,
        tau_th=float(rng.uniform(20.0, 60.0)),
        het=np.clip(rng.normal(1.0, 0.004, ranks), 0.98, 1.02),
    )


@dataclass
class Electrical:
    """Per-rank electrical state in one fault state (clean, or a fault at a given intensity)."""

    speed: np.ndarray  # (R,) compute speed relative to fmax
    f_compute: np.ndarray  # (R,) MHz while computing (when the HW slowdown is not asserted)
    p_act: np.ndarray  # (A, R) W per activity
    clock_act: np.ndarray  # (A, R) MHz per activity
    bits_act: np.ndarray  # (A, R) int reasons per activity
    hw_duty: np.ndarray  # (R,) share of time the HW slowdown is asserted
    f_hw: float  # MHz while asserted
    sticky_bits: np.ndarray  # (R,) reasons present whatever the activity (SW thermal)
    thermal_c: np.ndarray  # (R,) die temperature held by a thermal fault; NaN otherwise
    detail: str = ""


def _dynamic(fleet: Fleet, f: np.ndarray) -> np.ndarray:
    return fleet.demand * (f / fleet.kind.fmax) ** fleet.gamma


def electrical(fleet: Fleet, fault_kind: str | None = None, rank: int | None = None, x: float = 0.0) -> Electrical:
    """The electrical state with an optional per-GPU fault of intensity x in [0, 1] on `rank`."""
    k = fleet.kind
    fmax, alpha = k.fmax, fleet.alpha
    limit = np.full(fleet.ranks, k.limit_w)
    if fault_kind == "power_cap" and rank is not None:
        limit[rank] = k.limit_w - x * (k.limit_w - k.min_limit_w)
    headroom = np.maximum(limit - fleet.p_up, 1.0)
    f_c = fmax * np.minimum(1.0, (headroom / fleet.demand) ** (1.0 / fleet.gamma))
    p_c = fleet.p_up + _dynamic(fleet, f_c)
    capped = fleet.demand > headroom * 1.0001
    bits_c = np.where(capped, SW_POWER_CAP, 0)
    spd = speed(f_c, fmax, alpha)
    hw_duty = np.zeros(fleet.ranks)
    sticky = np.zeros(fleet.ranks, dtype=int)
    thermal_c = np.full(fleet.ranks, np.nan)
    f_hw = 0.35 * fmax
    detail = ""
    if fault_kind == "thermal" and rank is not None and x > 0:
        ratio = 1.0 - 0.8 * x  # wanted compute speed relative to the clean one
        want = ratio * spd[rank]
        f_sw = alpha * fmax / (1.0 / want - (1.0 - alpha))
        if f_sw >= 0.62 * fmax:  # the driver's software thermal control can hold the die by itself
            f_c[rank] = f_sw
            p_c[rank] = fleet.p_up[rank] + fleet.demand[rank] * (f_sw / fmax) ** fleet.gamma
            bits_c[rank] = SW_THERMAL
            sticky[rank] = SW_THERMAL
            spd[rank] = want
            thermal_c[rank] = 86.0
            detail = f"SW thermal, compute clock {f_sw / fmax:.2f} of fmax"
        else:  # hardware slowdown bursts: clock halves while asserted
            f_hi = min(f_c[rank], 0.8 * fmax)
            s_hi, s_lo = float(speed(f_hi, fmax, alpha)), float(speed(f_hw, fmax, alpha))
            duty = float(np.clip((s_hi - want) / (s_hi - s_lo), 0.0, 0.97))
            hw_duty[rank] = duty
            f_c[rank] = f_hi
            p_hi = fleet.p_up[rank] + fleet.demand[rank] * (f_hi / fmax) ** fleet.gamma
            p_lo = fleet.p_up[rank] + fleet.demand[rank] * (f_hw / fmax) ** fleet.gamma
            p_c[rank] = (1 - duty) * p_hi + duty * p_lo
            bits_c[rank] = SW_THERMAL
            sticky[rank] = SW_THERMAL
            spd[rank] = (1 - duty) * s_hi + duty * s_lo
            thermal_c[rank] = 91.0
            detail = f"HW thermal slowdown, asserted {duty:.0%} of the time"
    elif fault_kind == "power_cap" and rank is not None:
        detail = f"power limit {limit[rank]:.0f} W (default {k.limit_w:.0f} W)"
    p_act = np.stack(
        [
            fleet.p_up + 25.0,  # idle inside a step: clocks up, memory refreshing, no kernel
            p_c,
            np.minimum(fleet.p_spin, limit),
            np.minimum(fleet.p_xfer, limit),
            fleet.p_deep,
            np.minimum(fleet.p_light, limit),
        ]
    )
    clock_act = np.stack(
        [
            np.full(fleet.ranks, fmax),
            f_c,
            *[np.full(fleet.ranks, fmax)] * 2,
            np.full(fleet.ranks, k.fidle),
            np.full(fleet.ranks, fmax),
        ]
    )
    bits_act = np.zeros((N_ACT, fleet.ranks), dtype=int)
    bits_act[COMPUTE] = bits_c
    bits_act[DEEP] = GPU_IDLE_BIT
    return Electrical(spd, f_c, p_act, clock_act, bits_act, hw_duty, f_hw, sticky, thermal_c, detail)


def value_tables(fleet: Fleet) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(util, sm, tensor) per activity: util (A,), sm (A, R), tensor (A, R), each 0-1."""
    r = fleet.ranks
    util = np.array([0.0, 1.0, 1.0, 1.0, 0.0, 1.0])
    zeros = np.zeros(r)
    sm = np.stack(
        [
            zeros,
            fleet.sm_compute,
            np.full(r, fleet.sm_nccl),
            np.full(r, fleet.sm_nccl * 1.1),
            zeros,
            np.full(r, fleet.sm_light),
        ]
    )
    tensor = np.stack([zeros, fleet.tensor, zeros, zeros, zeros, np.full(r, fleet.tensor_light)])
    return util, sm, tensor
