"""mixed_models: synchronous data parallel on a job whose nodes hold two GPU models.

Layout. 2-32 nodes x 8 GPUs, one NIC per node; a share of the nodes (20-80%, in a block, as when a cluster
is extended, or scattered) holds the second model: H100 SXM next to H200 SXM (70% of seeds), or H100
PCIe next to H100 SXM. The step is the data-parallel step of `_dp` (compute, wait at the gradient
all-reduce, exposed communication), with the waits spinning in the NCCL kernel or idle on the CPU
(Horovod-style negotiation), drawn per seed.

Why the models differ (see `_gpu_models`). An H200 runs the clock-bound GEMMs as fast as an H100 SXM and
the memory-bound kernels 10-40% faster: with a clock-bound share alpha of 0.55-0.85 its compute is a few to
~15% shorter. An H100 PCIe has fewer SMs, a lower top clock and half the power limit (it computes
power-capped, 0x4 set, well below its top clock) and slower memory: its compute is 30-50% longer than the
SXM's. The all-reduce cannot finish before the slowest rank arrives, so every step the faster model's
GPUs finish early and wait: spinning (util ~100%, a few SMs, tensor pipes idle, spin power) or idle
(util, SM and tensor activity drop). That wait is the job's normal, every step, from the first one: a
decoy, not a fault. Tensor pipes are busy for the clock-bound share of the compute, so per interval the
two SXM models read about the same tensor activity and differ in SM activity, utilisation (idle waits)
and power; a PCIe GPU reads more tensor activity at a lower clock, its whole life.

Faults (one per faulty seed, on a GPU, node or port of either model, chosen 50/50), from the culprit out:
- thermal / power_cap: the GPU computes slower (lower clock, 0x20 or 0x4). On the slower model it slows the
  job at once; on the faster one it first eats that GPU's slack (its wait), so the GPU must be slowed by
  more than the models' gap before the job slows at all: the true slowdown is the job's, not the GPU's.
- gpu_degraded: the GPU's memory-bound kernels stall (HBM retries, a row remap pending, a link to the
  host retrying) at its normal clock with no reason bit: it computes longer while the others wait. DCGM
  counts tensor-pipe cycles, and a memory stall adds none, so its tensor activity per interval falls with
  the step like everyone's (it does not stand out there); its SMs stay occupied while stalled, so its SM
  activity (and utilisation where waits are idle) stays up while its peers' drop, and its power falls
  (stalled SMs switch less; a power-capped GPU may even get its top clock back and drop the 0x4 bit).
- slow_host: the node's GPUs idle before computing; the other ranks wait (localisable=False where waits
  are idle: every GPU then idles the same time per step, before or after its compute).
- slow_nic: a link trained at a lower rate or a congested port: the ring runs at its pace; xmit_wait rises
  on the port feeding it (downtrained, whose rate_gbps drops) or on the port itself (congested).
Decoys: the faster model waiting every step, PCIe GPUs power-capped while healthy, healthy SXM GPUs at their
power limit, a slightly slower die, a hot slot, a noisy port, an exporter outage.
step_s is the optimizer step's time, as in every data-parallel family.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gpuscope.bench.workloads import Case
from gpuscope.bench.workloads._common import (
    design,
    draw_duration,
    fleet_decoys,
    log_uniform_int,
    noisy_port,
    rng_for,
)
from gpuscope.bench.workloads._dp import (
    DP,
    _init,
    attach_any_fault,
    dp_job,
    draw_ring,
    fault_step,
    ring_dp,
    step,
    step_model,
)
from gpuscope.bench.workloads._engine import Job, StepPlan, render
from gpuscope.bench.workloads._faults import rank_fault
from gpuscope.bench.workloads._gpu import COMPUTE, H100, IDLE, SPIN, SW_POWER_CAP, Electrical, Fleet
from gpuscope.bench.workloads._gpu_models import H100_PCIE, H200, MixedFleet, capped, electrical_mixed, mixed_fleet
from gpuscope.bench.workloads._held_out import scrape_interval

FAMILY = "mixed_models"
DELTA_MAX = 8.0  # gpu_degraded at full intensity: memory-bound kernels 9x slower
STALL_POWER = 0.3  # dynamic power of SMs stalled on memory, as a share of computing ones'


def draw(rng: np.random.Generator) -> tuple[DP, MixedFleet, list[str]]:
    nodes = log_uniform_int(rng, 2, 32)
    gpn = 8
    kinds = [H100, H200] if rng.random() < 0.7 else [H100_PCIE, H100]
    n_second = int(np.clip(round(nodes * rng.uniform(0.2, 0.8)), 1, nodes - 1))
    node_kind = np.array([0] * (nodes - n_second) + [1] * n_second)
    if rng.random() < 0.5:  # scattered by the scheduler rather than in the block a cluster extension makes
        node_kind = rng.permutation(node_kind)
    mem_gain = {H100.name: 1.0, H200.name: float(rng.uniform(1.1, 1.4)), H100_PCIE.name: float(rng.uniform(0.6, 0.75))}
    mf = mixed_fleet(rng, node_kind, kinds, gpn, mem_gain, alpha=float(rng.uniform(0.55, 0.85)))
    fleet = mf.fleet
    decoys = ["mixed_gpu_models", "faster_model_waits"]
    decoys += fleet_decoys(rng, fleet)
    ring = draw_ring(rng, nodes, gpn, False, (0.25, 4.0))
    decoys += noisy_port(rng, ring.wait_base)
    wait_act = SPIN if rng.random() < 0.5 else IDLE
    dp = ring_dp(rng, ring, nodes, gpn, k=1, wait_act=wait_act, rails=False)
    return dp, mf, decoys


def degraded(mf: MixedFleet, rank: int, x: float) -> tuple[Electrical, Fleet]:
    """GPU `rank` with its memory-bound kernels (1 + delta)x slower, delta = x * DELTA_MAX, at its normal
    clock: the electrical state and the activity tables of the fault state."""
    fleet, elec = mf.fleet, electrical_mixed(mf)
    kind = mf.kinds[int(mf.kind_of[rank])]
    a, g, gamma = fleet.alpha, mf.mem[rank], fleet.gamma
    delta = x * DELTA_MAX
    f_c = float(elec.f_compute[rank])
    clock_part = mf.tau[rank] - (1.0 - a) / g  # the clean compute's clock-bound time (relative units)
    headroom = kind.limit_w - fleet.p_up[rank]
    f = f_c
    for _ in range(12):  # less switching per second frees power: a capped GPU's clock rises towards fmax
        clock_f = clock_part * f_c / f
        busy = (clock_f + (1.0 - a) / g) / (clock_f + (1.0 - a) / g * (1.0 + delta))  # share not stalled
        load = busy + STALL_POWER * (1.0 - busy)  # dynamic power relative to the clean compute's
        f = kind.fmax * min(1.0, (headroom / (fleet.demand[rank] * load)) ** (1.0 / gamma))
    tau_f = clock_part * f_c / f + (1.0 - a) / g * (1.0 + delta)
    out = Electrical(
        speed=elec.speed.copy(),
        f_compute=elec.f_compute.copy(),
        p_act=elec.p_act.copy(),
        clock_act=elec.clock_act.copy(),
        bits_act=elec.bits_act.copy(),
        hw_duty=elec.hw_duty,
        f_hw=elec.f_hw,
        sticky_bits=elec.sticky_bits,
        thermal_c=elec.thermal_c,
        detail=f"{kind.name}: memory-bound kernels {1 + delta:.2f}x slower at normal clocks (memory stalls)",
    )
    out.speed[rank] = elec.speed[rank] * mf.tau[rank] / tau_f  # compute time c0 * het / speed grows by tau_f / tau
    out.f_compute[rank] = out.clock_act[COMPUTE, rank] = f
    out.p_act[COMPUTE, rank] = fleet.p_up[rank] + fleet.demand[rank] * (f / kind.fmax) ** gamma * load
    out.bits_act[COMPUTE, rank] = SW_POWER_CAP if fleet.demand[rank] * load > headroom * 1.0001 else 0
    tensor = fleet.tensor.copy()  # the same tensor-pipe cycles, spread over a longer compute
    tensor[rank] *= (mf.tau[rank] / tau_f) * (f_c / f)
    return out, replace(fleet, tensor=tensor)


def fault_state(
    dp: DP, mf: MixedFleet, kind: str, where: tuple[int, ...], x: float, mode: str
) -> tuple[StepPlan, Electrical]:
    """The data-parallel step's fault states, on the mixed fleet's electrical model (and its memory stalls)."""

    def electrical_of(kind: str | None, rank: int | None, x: float) -> Electrical:
        if kind == "gpu_degraded" and rank is not None:
            return degraded(mf, rank, x)[0]
        return electrical_mixed(mf, kind, rank, x)

    f = rank_fault(kind, where, x, mode, step_model(dp, mf.fleet, electrical_of))
    return fault_step(dp, mf.fleet, f, where, mode)


def generate(seed: int) -> Case:
    rng = rng_for(FAMILY, seed)
    target = design(FAMILY, seed)
    dp, mf, decoys = draw(rng)
    fleet = mf.fleet
    duration = draw_duration(rng)
    sample_s = scrape_interval(rng, dp.ranks, duration)
    elec_clean = electrical_mixed(mf)
    clean = step(dp, elec_clean, fleet)
    if capped(elec_clean):
        decoys.append("power_capped_healthy_gpus")
    waits = clean.S - clean.fixed - dp.c0 * fleet.het / elec_clean.speed - dp.h0
    by_model = {kind.name: float(np.mean(waits[mf.ranks_of(k)]) / clean.S) for k, kind in enumerate(mf.kinds)}
    job = dp_job(
        FAMILY,
        seed,
        rng,
        dp,
        fleet,
        sample_s,
        duration,
        clean,
        elec_clean,
        pauses=[_init(rng, dp.ranks)],
        decoys=decoys,
        params={
            "gpu": "+".join(k.name for k in mf.kinds),
            "node_model": [mf.kinds[int(k)].name for k in mf.kind_of[:: dp.gpn]],
            "memory_gain": {k.name: float(mf.mem[mf.ranks_of(i)[0]]) for i, k in enumerate(mf.kinds)},
            "alpha": fleet.alpha,
            "wait_share_by_model": by_model,  # each model's mean wait per step / step time, clean
            "c0_s": dp.c0,
            "step_s": clean.S,
            "comm_exposed_s": clean.fixed,
            "link_gbps": float(dp.rate_gbps[0]),
            "wait": "spin" if dp.wait_act == SPIN else "idle",
        },
    )
    if target is not None:
        _attach(job, dp, mf, target, duration)
    return render(job)


def _attach(job: Job, dp: DP, mf: MixedFleet, target: float, duration: float) -> None:
    rng = job.rng

    def pick_node() -> int:
        model = int(rng.integers(len(mf.kinds)))  # either model, whatever their numbers
        return int(rng.choice(mf.ranks_of(model)[:: dp.gpn] // dp.gpn))

    def state(
        dp_: DP, fleet: Fleet, kind: str, where: tuple[int, ...], x: float, mode: str
    ) -> tuple[StepPlan, Electrical]:
        del fleet
        return fault_state(dp_, mf, kind, where, x, mode)

    weights = {"thermal": 1.0, "power_cap": 1.0, "slow_nic": 1.0, "slow_host": 1.0, "gpu_degraded": 1.0}
    idle_waits = dp.wait_act == IDLE
    choice = attach_any_fault(
        job,
        dp,
        mf.fleet,
        target,
        duration,
        job.clean.S,
        state,
        weights=weights,
        pick_node=pick_node,
        localisable=lambda c: not (c.kind == "slow_host" and idle_waits),
    )
    if choice.kind == "gpu_degraded":
        job.fleet_fault = degraded(mf, choice.where[0] * dp.gpn + choice.where[1], choice.x)[1]
