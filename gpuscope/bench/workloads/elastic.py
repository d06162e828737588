"""elastic: synchronous data parallel under elastic training (torchrun --max-restarts): now and then a
rank fails, the whole job stops and restarts from its last checkpoint, sometimes on fewer nodes.

Step. As spin_dp (see _dp): compute, then a ring all-reduce over one NIC per node, waits spinning in
NCCL. Each rank keeps its batch when the job shrinks (the global batch shrinks with it); the ring's
slightly shorter transfer on fewer nodes is neglected (it is at least 4 nodes, so under a few percent).

A restart, every 40 minutes or so after the first step:
- a rank fails (its process crashes: an Xid, an exception, a NCCL error; or its node is lost). Its GPU
  falls idle; every other rank is stuck in the collective it was in, spinning (util 100%, no tensor
  work, no bytes on any port) until the elastic agents notice: seconds after a crash, a minute or two
  when a node stops answering the rendezvous' keep-alives;
- the agents stop every worker (GPUs deep idle: clocks down, idle reason), start new ones (imports),
  re-rendezvous and initialise NCCL (short kernels now and then), and load the last checkpoint (copies
  to the GPUs; the NICs send only read requests): 1-5 minutes from the failure to the first step;
- warm-up: the first minutes' steps are slower (data-loader workers filling, allocator growth, lazy
  compilation), their extra time mostly idle GPUs, decaying over a few minutes (in the clean step time).
The work since the last checkpoint is done again (params: lost_s); the step time does not care.
A lost node (a third of failures, at most one per job) is left out: the job restarts on the others.
Either the node is down (its GPUs and port report nothing: NaN from the failure on) or it stays up,
drained (its GPUs deep idle, its port carrying only background traffic). Sometimes it comes back
10-40 minutes later: its agent joins, which restarts the job once more (no hang), on every node again.
Sharded checkpoints every 15-60 minutes (GPUs idle, every NIC streams to storage).

Faults (on ranks that stay in the job; a third of them start a few minutes after a restart, as when a
job lands on a GPU whose cooling or power limit is off): thermal, power_cap, slow_nic, slow_host as in
spin_dp, and gpu_degraded (see _held_out). They slow the job whenever it steps, not while it restarts.
Decoys: the restarts themselves (every rank stops, hangs, idles, warms up), the removed node (NaN or
idle), its return, checkpoints, healthy GPUs at their power limit, a slow die, a hot slot, a noisy
port, an exporter outage.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscope.bench.workloads import GPU_KEYS, PORT_KEYS, Case
from gpuscope.bench.workloads._common import design, draw_duration, rng_for
from gpuscope.bench.workloads._dp import DP, _init, attach_any_fault, dp_job, draw_dp, step
from gpuscope.bench.workloads._dp import fault_state as dp_fault_state
from gpuscope.bench.workloads._engine import Pause, StepPlan, mix, onehot, render
from gpuscope.bench.workloads._gpu import COMPUTE, DEEP, GPU_IDLE_BIT, SPIN, Electrical, Fleet, electrical
from gpuscope.bench.workloads._held_out import (
    degraded_electrical,
    degraded_fleet,
    scrape_interval,
    stall_compute,
)
from gpuscope.bench.workloads._pauses import shard_write, snapshot

FAMILY = "elastic"
BACKGROUND_BYTES_S = 2e5  # what an idle port still sends (subnet management, monitoring)


@dataclass
class Restart:
    t: float  # the failure (or the returning node's join)
    resume: float  # the first step after it
    warm_end: float
    cause: str  # rank_crash, node_lost, node_rejoin
    rank: int  # the failed rank, -1 for a join


@dataclass
class Removal:
    node: int
    start: float
    end: float  # when it came back; the job's end if never
    mode: str  # nan: down, nothing scraped; idle: up and drained


def _restart(
    rng: np.random.Generator, dp: DP, t: float, cause: str, failed: np.ndarray
) -> tuple[list[Pause], float, float]:
    """The pauses of one restart from time t; returns them, the first step and the end of warm-up."""
    hang = {"rank_crash": rng.uniform(5, 60), "node_lost": rng.uniform(30, 150), "node_rejoin": 0.0}[cause]
    parts = np.array([hang, rng.uniform(10, 40), rng.uniform(15, 60), rng.uniform(15, 120)])
    parts *= np.clip(parts.sum(), 60, 300) / parts.sum()  # 1-5 minutes from the failure to the first step
    stuck = np.where(failed[:, None], onehot(DEEP)[None, :], onehot(SPIN)[None, :])
    reading = np.full(dp.nodes, rng.uniform(2e6, 2e7))
    edges = t + np.concatenate([[0.0], np.cumsum(parts)])
    pauses = [
        Pause(edges[0], edges[1], stuck, name="hung in a collective"),
        Pause(edges[1], edges[2], onehot(DEEP), name="workers stopped and relaunched"),
        Pause(edges[2], edges[3], mix(deep_idle=0.6, light=0.4), grain=5.0, name="rendezvous and init"),
        Pause(edges[3], edges[4], mix(light=0.5, idle=0.2, deep_idle=0.3), 3.0, "load checkpoint", False, 1.0, reading),
    ]
    pauses = [p for p in pauses if p.end > p.start]
    resume = float(edges[-1])
    first_share, tau = float(rng.uniform(0.3, 0.7)), float(rng.uniform(60, 240))
    warming = mix(idle=0.85, light=0.15)
    for a in np.arange(resume, resume + 3 * tau, 30.0):
        share = first_share * float(np.exp(-(a + 15.0 - resume) / tau))
        pauses.append(Pause(float(a), float(a) + 30.0, warming, name="warm-up", stall=True, share=share))
    return pauses, resume, resume + 3 * tau


def _timeline(
    rng: np.random.Generator, dp: DP, first: float, duration: float
) -> tuple[list[Pause], list[Restart], Removal | None]:
    pauses: list[Pause] = []
    restarts: list[Restart] = []
    removal: Removal | None = None
    t = first + float(rng.uniform(600, min(3000, duration - first - 900)))
    while t < duration - 900:
        lost = removal is None and rng.random() < 0.35
        out = removal.node if removal is not None and removal.start <= t < removal.end else -1
        rank = int(rng.choice([r for r in range(dp.ranks) if r // dp.gpn != out]))
        node = rank // dp.gpn
        failed = np.zeros(dp.ranks, dtype=bool)
        failed[node * dp.gpn : (node + 1) * dp.gpn] = lost
        failed[rank] = True
        more, resume, cursor = _restart(rng, dp, t, "node_lost" if lost else "rank_crash", failed)
        pauses += more
        restarts.append(Restart(t, resume, cursor, "node_lost" if lost else "rank_crash", rank))
        if lost:
            removal = Removal(node, t, duration, "nan" if rng.random() < 0.5 else "idle")
            back = cursor + float(rng.uniform(600, 2400))
            if rng.random() < 0.4 and back < duration - 600:
                more, resume, cursor = _restart(rng, dp, back, "node_rejoin", np.zeros(dp.ranks, dtype=bool))
                pauses += more
                restarts.append(Restart(back, resume, cursor, "node_rejoin", -1))
                removal.end = back
        t = cursor + 600 + float(rng.exponential(1800))
    return pauses, restarts, removal


def _checkpoints(
    rng: np.random.Generator, dp: DP, first: float, duration: float, restarts: list[Restart]
) -> tuple[list[Pause], list[float]]:
    """Sharded checkpoints on a wall-clock grid, none inside a restart; returns them and their ends."""
    pauses, ends = [], []
    period = float(rng.uniform(900, 3600))
    t = first + period
    while t < duration - 300:
        snap, write = float(rng.uniform(3, 20)), float(rng.uniform(20, 120))
        if not any(r.t - 60 < t + snap + write and t < r.warm_end for r in restarts):
            sent = np.full(dp.nodes, rng.uniform(1e9, 4e9))
            waits = np.full(dp.nodes, rng.uniform(0.05, 0.3))
            pauses += [snapshot(t, t + snap), shard_write(t + snap, t + snap + write, sent, waits)]
            ends.append(t + snap + write)
        t += period
    return pauses, ends


def fault_state(
    dp: DP, fleet: Fleet, kind: str, where: tuple[int, ...], x: float, mode: str
) -> tuple[StepPlan, Electrical]:
    if kind == "gpu_degraded":
        rank = where[0] * dp.gpn + where[1]
        elec = degraded_electrical(fleet, rank, x)
        return stall_compute(step(dp, elec, degraded_fleet(fleet, rank, x)), rank, x), elec
    return dp_fault_state(dp, fleet, kind, where, x, mode)


def _remove(rng: np.random.Generator, case: Case, fleet: Fleet, rm: Removal) -> None:
    """The removed node in the job's telemetry: its NIC carries none of the job's traffic while it is out;
    its GPUs and port report nothing (down) or idle (drained)."""
    tel, g, dt = case.telemetry, case.gpus_per_node, case.sample_s
    T = len(case.times)
    gone = (case.times > rm.start) & (case.times <= rm.end)
    idx = np.arange(T)
    for key in ("xmit_bytes", "xmit_wait"):
        row = tel[key][rm.node]
        ok = np.isfinite(row)
        filled = np.interp(idx, idx[ok], row[ok])
        inc = np.diff(filled, prepend=filled[0])
        background = BACKGROUND_BYTES_S * dt * rng.lognormal(0.0, 0.3, T) if key == "xmit_bytes" else 0.0
        inc = np.where(gone, background, inc)
        tel[key][rm.node] = np.where(ok, np.floor(filled[0] + np.cumsum(inc)), np.nan)
    ranks = np.arange(rm.node * g, (rm.node + 1) * g)
    if rm.mode == "nan":
        for key in GPU_KEYS:
            tel[key][np.ix_(ranks, gone)] = np.nan
        for key in PORT_KEYS:
            tel[key][rm.node, gone] = np.nan
        return
    n = int(gone.sum())
    p_deep = fleet.p_deep[ranks][:, None] * rng.normal(1.0, 0.015, (g, 1)) * (1 + rng.normal(0, 0.02, (g, n)))
    idle_c = fleet.t_inlet[ranks] + fleet.r_th[ranks] * fleet.p_deep[ranks]
    temp = tel["temp_c"][ranks]
    start = int(np.argmax(gone))
    seen = np.isfinite(temp[:, :start])
    last = np.array([temp[i, :start][seen[i]][-1] if seen[i].any() else idle_c[i] for i in range(g)])
    t_out = case.times[gone] - rm.start
    cooling = idle_c[:, None] + (last - idle_c)[:, None] * np.exp(-t_out[None, :] / fleet.tau_th)
    values = {
        "util_pct": np.zeros((g, n)),
        "sm_active_pct": np.zeros((g, n)),
        "tensor_active_pct": np.zeros((g, n)),
        "power_w": np.round(p_deep, 2),
        "sm_clock_mhz": np.full((g, n), fleet.kind.fidle),
        "clock_event_reasons": np.full((g, n), float(GPU_IDLE_BIT)),
        "temp_c": np.round(cooling + rng.normal(0, 0.4, (g, n))),
    }
    for key, v in values.items():
        block = tel[key][np.ix_(ranks, gone)]
        tel[key][np.ix_(ranks, gone)] = np.where(np.isfinite(block), v, np.nan)
    after = case.times > rm.end
    if after.any():  # back in the job: its temperature carries on from where the idle node left it
        first = int(np.argmax(after))
        step_c = cooling[:, -1] - np.nan_to_num(temp[:, first], nan=float(np.nanmean(temp[:, first:])))
        decay = np.exp(-(case.times[after] - rm.end)[None, :] / fleet.tau_th)
        tel["temp_c"][np.ix_(ranks, after)] = np.round(temp[:, after] + step_c[:, None] * decay)


def generate(seed: int) -> Case:
    rng = rng_for(FAMILY, seed)
    target = design(FAMILY, seed)
    dp, fleet, decoys = draw_dp(rng, wait_act=SPIN, rails=False, nodes_range=(4, 32))
    duration = draw_duration(rng)
    sample_s = scrape_interval(rng, dp.ranks, duration)
    elec = electrical(fleet)
    clean = step(dp, elec, fleet)
    if np.any(elec.bits_act[COMPUTE] & 0x4):
        decoys.append("power_capped_healthy_gpus")
    init = _init(rng, dp.ranks)
    restart_pauses, restarts, removal = _timeline(rng, dp, init.end, duration)
    ckpts, saved = _checkpoints(rng, dp, init.end, duration, restarts)
    decoys += ["elastic_restart", "warmup_after_restart"] + (["checkpoint_sharded"] if ckpts else [])
    if removal is not None:
        decoys.append(f"node_removed_{removal.mode}")
        if removal.end < duration:
            decoys.append("node_rejoined")
    job = dp_job(
        FAMILY,
        seed,
        rng,
        dp,
        fleet,
        sample_s,
        duration,
        clean,
        elec,
        pauses=[init, *restart_pauses, *ckpts],
        decoys=decoys,
        params={
            "gpu": fleet.kind.name,
            "k": dp.k,
            "step_s": clean.S,
            "comm_exposed_s": clean.fixed,
            "link_gbps": float(dp.rate_gbps[0]),
            "wait": "spin",
            "restarts": [
                (r.t, r.resume, r.cause, r.rank, r.t - max([init.end, *(e for e in saved if e < r.t)]))
                for r in restarts
            ],  # (failure, first step after, cause, rank, lost_s: work since the last checkpoint)
            "removed": None if removal is None else (removal.node, removal.start, removal.end, removal.mode),
        },
    )
    if target is not None:
        survivors = [n for n in range(dp.nodes) if removal is None or n != removal.node]

        weights = {"thermal": 1.0, "power_cap": 1.0, "slow_nic": 1.0, "slow_host": 1.0, "gpu_degraded": 1.0}
        attach_any_fault(
            job,
            dp,
            fleet,
            target,
            duration,
            clean.S,
            fault_state,
            weights=weights,
            pick_node=lambda: int(rng.choice(survivors)),
        )
        f = job.fault
        assert f is not None
        after = [r.resume for r in restarts if r.resume >= 570 and r.resume + 570 < duration]
        if after and rng.random() < 0.35:  # the fault shows up a few minutes after a restart
            f.onset_s = float(rng.choice(after)) + float(rng.uniform(30, 330))
            f.end_s = f.onset_s + float(rng.uniform(180, min(2400, duration - 60 - f.onset_s)))
    case = render(job)
    if removal is not None:
        _remove(rng, case, fleet, removal)
    return case
