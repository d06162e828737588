"""GPU models besides the H100 SXM of `_gpu` (the H200 SXM, the H100 PCIe), and fleets that mix them.

What differs between the models, and what it does to a kernel:
- H200 SXM: the H100's die (132 SMs, 1980 MHz, 700 W) with 141 GB of HBM3e at 4.8 TB/s instead of 80 GB
  at 3.35 TB/s. Clock-bound work (dense GEMMs) runs at the same speed; memory-bound kernels (attention,
  norms, element-wise, optimizer, decode's weight and KV reads) run faster, by less than the bandwidth
  ratio in practice (10-40%). Its idle power is a little higher (more HBM to refresh).
- H100 PCIe: 114 SMs, 1755 MHz, 350 W, 2 TB/s HBM2e, cooled by the server's airflow: its dense compute
  asks for about the power it is allowed, so it runs power-capped (0x4) most of the time it computes.

A job's compute time on rank r, relative to an H100 SXM at its top clock, is
    tau_r = alpha * (fmax_sxm / f_r) * (sms_sxm / sms_r) + (1 - alpha) / mem_r
(alpha: the clock-bound share, mem_r: the memory-bound speed of the model relative to the SXM). The
electrical model of `_gpu` knows one GPU type per fleet; here each type's ranks get their own
`electrical()` and the results are put back together in rank order, and the model's speed enters the
fleet's `het` (compute time apart from clocks), so the step models of `_dp` work unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from gpuscope.bench.workloads._gpu import COMPUTE, H100, Electrical, Fleet, GpuType, draw_fleet, electrical

H200 = GpuType("H200-SXM", 1980.0, 345.0, 700.0, 200.0, 78.0)
H100_PCIE = GpuType("H100-PCIe", 1755.0, 345.0, 350.0, 200.0, 48.0)
SMS = {H100.name: 132, H200.name: 132, H100_PCIE.name: 114}
HBM_GB = {H100.name: 80.0, H200.name: 141.0, H100_PCIE.name: 80.0}
HBM_TB_S = {H100.name: 3.35, H200.name: 4.8, H100_PCIE.name: 2.0}

_PER_RANK = (
    "demand",
    "p_up",
    "p_spin",
    "p_xfer",
    "p_light",
    "p_deep",
    "tensor",
    "sm_compute",
    "r_th",
    "t_inlet",
    "het",
)


@dataclass
class MixedFleet:
    """A fleet whose nodes hold different GPU models. `fleet` is what the shared layer reads (its `kind`
    is the SXM, the highest clock and limit, used only to bound readings); `kinds` the model of each rank."""

    fleet: Fleet
    kinds: list[GpuType]  # the models present
    kind_of: np.ndarray  # (R,) index into kinds
    mem: np.ndarray  # (R,) memory-bound speed relative to an H100 SXM
    tau: np.ndarray  # (R,) clean compute time relative to an H100 SXM at fmax (see the module docstring)

    def ranks_of(self, k: int) -> np.ndarray:
        return np.nonzero(self.kind_of == k)[0]


def mixed_fleet(
    rng: np.random.Generator,
    node_kind: np.ndarray,
    kinds: list[GpuType],
    gpus_per_node: int,
    mem_gain: dict[str, float],
    alpha: float | None = None,
) -> MixedFleet:
    """Draw a fleet whose node n holds kinds[node_kind[n]]. The die-to-die spread (leakage, slots, inlet
    air) is drawn once as for an SXM fleet, then each model's electrical constants are put on its ranks.
    `mem_gain`: the memory-bound speed of each model relative to the SXM (1 for the SXM itself)."""
    nodes = len(node_kind)
    base = draw_fleet(rng, nodes, gpus_per_node, H100)
    if alpha is not None:
        base.alpha = alpha
    kind_of = np.repeat(node_kind, gpus_per_node)
    leak = base.p_deep / H100.deep_w
    arrays = {name: getattr(base, name).copy() for name in _PER_RANK}
    for k, kind in enumerate(kinds):
        idx = kind_of == k
        if kind.name == H200.name:
            extra = 8.0 * leak[idx]  # 60 GB more HBM, refreshed and powered
            for name in ("p_up", "p_spin", "p_xfer", "p_light"):
                arrays[name][idx] += extra
            arrays["p_deep"][idx] = H200.deep_w * leak[idx]
        elif kind.name == H100_PCIE.name:
            scale = H100_PCIE.limit_w / H100.limit_w
            p_up = H100_PCIE.deep_w * leak[idx] + (base.p_up[idx] - H100.deep_w * leak[idx]) * scale
            for name in ("p_spin", "p_xfer", "p_light"):
                arrays[name][idx] = p_up + (getattr(base, name)[idx] - base.p_up[idx]) * scale
            arrays["p_up"][idx] = p_up
            arrays["p_deep"][idx] = H100_PCIE.deep_w * leak[idx]
            # the same GEMMs on fewer SMs at a lower top clock: the dynamic power scales with both
            sms = SMS[H100_PCIE.name] / SMS[H100.name]
            arrays["demand"][idx] = base.demand[idx] * sms * (H100_PCIE.fmax / H100.fmax) ** base.gamma
            arrays["r_th"][idx] = base.r_th[idx] * 2.0  # a passive card in the server's airflow
    fleet = replace(base, **arrays)
    mf = MixedFleet(fleet, kinds, kind_of, np.array([mem_gain[kinds[k].name] for k in kind_of]), np.ones(len(kind_of)))
    # the model's speed, at each rank's clean clock, goes into het (compute time apart from clocks)
    clean = electrical_mixed(mf)
    fmax_k = np.array([kinds[k].fmax for k in kind_of])
    f = clean.f_compute
    sms_r = np.array([SMS[kinds[k].name] for k in kind_of]) / SMS[H100.name]
    clock_part = fleet.alpha * (H100.fmax / f) / sms_r
    mf.tau = clock_part + (1.0 - fleet.alpha) / mf.mem
    e = fleet.alpha * fmax_k / f + 1.0 - fleet.alpha  # 1 / speed as `electrical` computes it
    fleet.het = fleet.het * mf.tau / e
    # tensor pipes are busy for the clock-bound share of the compute: more of it where memory is faster
    fleet.tensor = np.clip(fleet.tensor * (clock_part / mf.tau) / fleet.alpha, 0.05, 0.95)
    return mf


def _subset(fleet: Fleet, idx: np.ndarray, kind: GpuType) -> Fleet:
    return replace(fleet, kind=kind, ranks=len(idx), **{name: getattr(fleet, name)[idx] for name in _PER_RANK})


def electrical_mixed(
    mf: MixedFleet, fault_kind: str | None = None, rank: int | None = None, x: float = 0.0
) -> Electrical:
    """`_gpu.electrical` per GPU model, put back together in rank order."""
    R = mf.fleet.ranks
    parts: list[tuple[np.ndarray, Electrical]] = []
    f_hw, detail = 0.35 * H100.fmax, ""
    for k, kind in enumerate(mf.kinds):
        idx = mf.ranks_of(k)
        if len(idx) == 0:
            continue
        local = int(np.searchsorted(idx, rank)) if rank is not None and rank in idx else None
        e = electrical(_subset(mf.fleet, idx, kind), fault_kind if local is not None else None, local, x)
        if local is not None:
            f_hw, detail = e.f_hw, f"{kind.name}: {e.detail}"
        parts.append((idx, e))
    out = Electrical(
        speed=np.zeros(R),
        f_compute=np.zeros(R),
        p_act=np.zeros((parts[0][1].p_act.shape[0], R)),
        clock_act=np.zeros((parts[0][1].clock_act.shape[0], R)),
        bits_act=np.zeros((parts[0][1].bits_act.shape[0], R), dtype=int),
        hw_duty=np.zeros(R),
        f_hw=f_hw,
        sticky_bits=np.zeros(R, dtype=int),
        thermal_c=np.full(R, np.nan),
        detail=detail,
    )
    for idx, e in parts:
        out.speed[idx], out.f_compute[idx], out.hw_duty[idx] = e.speed, e.f_compute, e.hw_duty
        out.sticky_bits[idx], out.thermal_c[idx] = e.sticky_bits, e.thermal_c
        out.p_act[:, idx], out.clock_act[:, idx], out.bits_act[:, idx] = e.p_act, e.clock_act, e.bits_act
    return out


def capped(elec: Electrical) -> bool:
    return bool(np.any(elec.bits_act[COMPUTE] & 0x4))
