"""From a step model to what the exporters would have scraped: the measurement layer every family shares.

A family describes one training step (iteration) per fault state as a `StepPlan`: for every rank, the
step is a sequence of segments (phase intervals of the step), each with a composition over activities
(idle, compute, NCCL spin, NCCL transfer, deep idle, light kernels); and for every port, the bytes it
sends and the seconds it waits for credits in given phase intervals of the step. Step times are
expectations over per-step jitter (the family computes them); everything here is bookkeeping.

Time. The job progresses through steps at 1/step_time, not at all during pauses (start-up, checkpoints,
evaluation), and all ranks stall together during data-loader hiccups. n(t), the number of steps done at
time t, is kept exactly piecewise linear, so every sample can be placed at its true phase inside the step.

How each metric is measured, which is where telemetry stops being a clean average:
- DCGM profiling gauges (tensor_active, sm_active) average over the whole sample interval;
- NVML utilisation covers the last 1/6 s to 1 s before the read, power the last second (H100 reports a
  1 s average): short windows at an effectively random phase of the step, so a GPU spending 20% of each
  step in the all-reduce reads 'all-reduce' in about one sample in five;
- clocks, clock-event reasons: instantaneous;
- temperature follows power through a first-order lag (tens of seconds), integer degrees;
- InfiniBand counters are exact cumulative byte and wait-tick counts at the read;
- each node's exporter reads at its own offset inside the interval (a few ms apart per node), so nodes see
  the step at different phases; the collector files the sample under the interval's time anyway.
Measurement noise is multiplicative on gauges, samples drop per node (exporter missed a scrape, GPUs and
NICs of the node together) and now and then per field.

`render` measures one clean and one faulty step over the whole job; `render_steps`, the same measurement,
a sequence of regimes each with its own steps (see `_regimes`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuscope.bench.workloads import GPU_KEYS, PORT_KEYS, Case, GroundTruth
from gpuscope.bench.workloads._gpu import (
    COMPUTE,
    DEEP,
    HW_SLOWDOWN,
    HW_THERMAL,
    N_ACT,
    Electrical,
    Fleet,
    value_tables,
)

WAIT_TICK_HZ = 2.5e8  # port_xmit_wait ticks per second of stall (a 4 ns port clock)
SAMPLE_CHOICES = (1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0)
MAX_RANK_SAMPLES = 1_200_000  # ranks x samples per case: fleet-sized jobs are scraped less often


@dataclass
class StepPlan:
    S: float  # seconds per step at nominal drift, with no stalls
    fixed: float  # seconds of S that do not scale with the compute drift (exposed communication)
    bounds: np.ndarray  # (J+1, R) segment boundaries as phases 0..1 of the step
    comp: np.ndarray  # (J, R, A) composition of each segment
    grain: np.ndarray  # (J,) seconds over which a mixed segment alternates its activities (0: pure)
    port_bounds: np.ndarray  # (K, 2, P) phase interval of each port transfer segment
    port_bytes: np.ndarray  # (K, P) bytes sent per step in that segment
    port_wait: np.ndarray  # (K, P) seconds of credit wait per step in that segment


def plan(
    S: float,
    fixed: float,
    segments: list[tuple[np.ndarray, np.ndarray, float]],
    ports: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    ranks: int,
) -> StepPlan:
    """Build a plan from rank segments [(duration (R,), composition (R, A) or (A,), grain)] whose
    durations add up to S on every rank, and port segments [(start_s, end_s, bytes, wait_s)], each (P,)."""
    durations = np.stack([np.broadcast_to(np.asarray(d, dtype=float), (ranks,)) for d, _, _ in segments])
    durations = np.maximum(durations, 0.0)
    total = durations.sum(axis=0)
    if not np.allclose(total, S, rtol=1e-6, atol=1e-9):
        raise AssertionError(f"segments add to {total.min()}..{total.max()}, not the step {S}")
    bounds = np.vstack([np.zeros(ranks), np.cumsum(durations, axis=0) / total])
    bounds[-1] = 1.0
    comp = np.stack([np.broadcast_to(np.asarray(c, dtype=float), (ranks, N_ACT)) for _, c, _ in segments])
    grain = np.array([g for _, _, g in segments], dtype=float)
    pb = np.stack([np.stack([np.clip(a / S, 0, 1), np.clip(b / S, 0, 1)]) for a, b, _, _ in ports])
    return StepPlan(
        S=float(S),
        fixed=float(fixed),
        bounds=bounds,
        comp=comp,
        grain=grain,
        port_bounds=pb,
        port_bytes=np.stack([np.asarray(b, dtype=float) for _, _, b, _ in ports]),
        port_wait=np.stack([np.asarray(w, dtype=float) for _, _, _, w in ports]),
    )


def onehot(act: int) -> np.ndarray:
    v = np.zeros(N_ACT)
    v[act] = 1.0
    return v


def mix(**shares: float) -> np.ndarray:
    from gpuscope.bench.workloads._gpu import ACT_NAMES

    v = np.zeros(N_ACT)
    for name, share in shares.items():
        v[ACT_NAMES.index(name)] = share
    return v / v.sum()


@dataclass
class Pause:
    """A stretch where the job does not step (start-up, checkpoint, eval), or, with stall=True, where all
    ranks stall inside steps (data-loader hiccup: counted in the step time)."""

    start: float
    end: float
    comp: np.ndarray  # (A,) or (R, A)
    grain: float = 0.0
    name: str = ""
    stall: bool = False
    share: float = 1.0  # a stall's share of [start, end] (many short stalls spread over it)
    port_bytes_s: np.ndarray | None = None  # (P,) extra traffic (checkpoint writes to storage)
    port_wait_s: np.ndarray | None = None  # (P,) credit-wait seconds per second


@dataclass
class Fault:
    kind: str
    node: int
    gpu: int | None
    port: int | None
    onset_s: float
    end_s: float
    target: float
    localisable: bool = True
    detail: str = ""
    rate_factor: float = 1.0  # reported link rate multiplier on `port` (a link trained at a lower rate)
    ramp_s: float = 0.0  # a thermal fault's temperature rises this long before the clocks drop
    thermal_c: float = np.nan


@dataclass
class Job:
    family: str
    seed: int
    rng: np.random.Generator
    nodes: int
    gpus_per_node: int
    sample_s: float
    duration_s: float
    fleet: Fleet
    port_node: np.ndarray
    port_gpu: np.ndarray
    rate_gbps: np.ndarray  # (P,) nominal link rates
    clean: StepPlan
    elec_clean: Electrical
    faulty: StepPlan | None = None
    elec_fault: Electrical | None = None
    fault: Fault | None = None
    pauses: list[Pause] = field(default_factory=list)
    drift_amp: float = 0.01
    ramp: tuple[float, float, float] | None = None  # (start_s, extra, tau_s): steps slower after start
    noise: float = 0.02
    drop_rate: float = 0.005
    util_window_s: float = 1.0
    power_window_s: float = 1.0
    background_bytes_s: float = 2e5
    decoys: list[str] = field(default_factory=list)
    params: dict[str, object] = field(default_factory=dict)
    # What the GPUs' activities read (SM and tensor activity) in the fault state, where the fault changes
    # it (a GPU stalled on memory keeps its SMs occupied but not its tensor pipes); None: the clean fleet's.
    fleet_fault: Fleet | None = None


def draw_measurement(job: Job, drift: tuple[float, float] = (0.005, 0.02), power_window_s: float | None = None) -> None:
    """Draw, in this order, the job's slow drift of its step time, its measurement noise, its rate of
    missed scrapes and NVML's utilisation and power windows (None: H100s report a 1 s power average,
    other GPUs 0.1 s or 1 s)."""
    rng = job.rng
    job.drift_amp = float(rng.uniform(*drift))
    job.noise = float(rng.uniform(0.01, 0.05))
    job.drop_rate = float(rng.uniform(0.002, 0.02))
    job.util_window_s = float(rng.choice([1 / 6, 1.0]))
    if power_window_s is None:
        power_window_s = 1.0 if job.fleet.kind.name.startswith("H100") else float(rng.choice([0.1, 1.0]))
    job.power_window_s = power_window_s


# ---------------------------------------------------------------------------------------------------------
# the clock


def sample_grid(
    rng: np.random.Generator, ranks: int, duration_s: float, choices: tuple[float, ...] = SAMPLE_CHOICES
) -> float:
    """A scrape interval among `choices`, lengthened for big jobs so a case stays within MAX_RANK_SAMPLES."""
    i = int(rng.integers(len(choices)))
    while i < len(choices) - 1 and ranks * duration_s / choices[i] > MAX_RANK_SAMPLES:
        i += 1
    return choices[i]


def _overlap(a0: np.ndarray, a1: np.ndarray, b0: float, b1: float) -> np.ndarray:
    return np.clip(np.minimum(a1, b1) - np.maximum(a0, b0), 0.0, None)


class _Timeline:
    """n(t): steps completed at time t, piecewise linear, flat in pauses."""

    def __init__(self, edges: np.ndarray, rate: np.ndarray, pauses: list[Pause]) -> None:
        dt = edges[1] - edges[0]
        cuts = [edges]
        for p in pauses:
            if not p.stall:
                cuts.append(np.array([p.start, p.end]))
        pts = np.unique(np.clip(np.concatenate(cuts), edges[0], edges[-1]))
        mid = 0.5 * (pts[:-1] + pts[1:])
        r = rate[np.clip((mid // dt).astype(int), 0, len(rate) - 1)]
        for p in pauses:
            if not p.stall:
                r = np.where((mid >= p.start) & (mid < p.end), 0.0, r)
        self.t = pts
        self.n = np.concatenate([[0.0], np.cumsum(r * np.diff(pts))])

    def __call__(self, t: np.ndarray) -> np.ndarray:
        return np.interp(t, self.t, self.n, left=0.0)


# ---------------------------------------------------------------------------------------------------------
# compositions


def _segment_comp(
    p: StepPlan, n_end: np.ndarray, n_start: np.ndarray, window_s: float, rng: np.random.Generator
) -> np.ndarray:
    """(A, R, C): share of the training part of each window spent in each activity."""
    dn = n_end - n_start
    live = dn > 1e-12
    dn = np.where(live, dn, 1.0)
    fl_e, fl_s = np.floor(n_end), np.floor(n_start)
    fr_e, fr_s = n_end - fl_e, n_start - fl_s
    out = np.zeros((N_ACT, *n_end.shape))
    for j in range(len(p.grain)):
        b0 = p.bounds[j][:, None]
        length = p.bounds[j + 1][:, None] - b0
        if not np.any(length > 0):
            continue
        spent = (fl_e - fl_s) * length + np.clip(fr_e - b0, 0, length) - np.clip(fr_s - b0, 0, length)
        share = np.where(live, spent / dn, 0.0)
        comp = p.comp[j]  # (R, A)
        pure = bool(np.all(comp.max(axis=1) > 0.999))
        lam = 1.0 if (pure or p.grain[j] <= 0) else min(1.0, window_s / p.grain[j])
        out += share[None] * (lam * comp.T[:, :, None])
        if lam < 1.0:
            _add_draw(out, share * (1.0 - lam), comp, rng)
    return out


def _add_draw(out: np.ndarray, weight: np.ndarray, comp: np.ndarray, rng: np.random.Generator) -> None:
    """Add weight to one activity per (rank, column), drawn from comp (R, A): what a short window sees of a
    segment that alternates between activities."""
    mask = weight > 0
    if not mask.any():
        return
    rows, cols = np.nonzero(mask)
    cum = np.cumsum(comp[rows], axis=1)
    u = rng.random(len(rows))[:, None] * cum[:, -1:]
    act = np.minimum((u > cum).sum(axis=1), N_ACT - 1)
    np.add.at(out, (act, rows, cols), weight[rows, cols])


# ---------------------------------------------------------------------------------------------------------
# rendering


@dataclass
class Regime:
    """A stretch of the job with its own step: from `start` (a multiple of the sample interval; the first
    regime starts at 0) to the next regime's start. `render` gives the whole job one regime."""

    start: float
    clean: StepPlan
    faulty: StepPlan | None = None  # the step while the job's fault is on, where it overlaps this regime


def render(job: Job) -> Case:
    """The job's telemetry with one clean and one faulty step (job.clean, job.faulty) for its whole length."""
    return render_steps(job, [Regime(0.0, job.clean, job.faulty)], clip_sent=False)


def render_steps(job: Job, regimes: list[Regime], phase_jitter: float = 0.0, clip_sent: bool = True) -> Case:
    """Render `job` with the step of each regime in turn (its own clean/faulty plans are not read here).
    phase_jitter: the per-step relative spread of step times, which makes the phase of the step at each
    read wander (a random walk in the step count, sd phase_jitter * sqrt(steps)) instead of strobing at a
    fixed one. clip_sent: an interval's bytes are never negative (stalls that remove traffic, as moe_fsdp's
    router states can, otherwise take bytes off the counter: the single-step families keep that)."""
    rng = job.rng
    dt = job.sample_s
    T = int(job.duration_s // dt)
    times = dt * (1.0 + np.arange(T))
    edges = np.concatenate([[0.0], times])
    nodes, gpn = job.nodes, job.gpus_per_node
    nor = np.repeat(np.arange(nodes), gpn)  # node of rank
    mids = times - dt / 2
    starts = np.array([r.start for r in regimes])
    reg = np.clip(np.searchsorted(starts, mids, side="right") - 1, 0, len(regimes) - 1)
    job.pauses = [Pause(-1e9, 0.0, onehot(DEEP), name="before the job"), *job.pauses]
    tl, step_s, clean_step_s, faults = _pace(job, regimes, reg, edges, phase_jitter)

    # each node's exporter reads at its own offset inside the interval
    offset = rng.uniform(0.0, min(dt, 1.0) * 0.9, nodes)
    tau = np.clip(times[None, :] - offset[:, None] - rng.uniform(0, 0.02, (nodes, T)), 1e-3, None)
    fault_on = np.zeros((nodes, T), dtype=bool)
    f = job.fault
    if f is not None:
        fault_on = (tau >= f.onset_s) & (tau < f.end_s)
    groups = _groups(regimes, reg)
    gpu, p_mean = _gpu_readings(job, groups, tl, tau, fault_on[nor], nor)
    temp = _temperature(job, p_mean, tau)
    gpu = _gauge_noise(job, *gpu)
    ports = _port_readings(job, groups, tl, tau, fault_on, clip_sent)
    telemetry = as_telemetry((*gpu, temp), ports)
    _drop(job, telemetry, nor, job.port_node, T)
    return Case(
        family=job.family,
        seed=job.seed,
        nodes=nodes,
        gpus_per_node=gpn,
        sample_s=dt,
        duration_s=job.duration_s,
        times=times,
        telemetry=telemetry,
        port_node=job.port_node.copy(),
        port_gpu=job.port_gpu.copy(),
        faults=faults,
        step_s=step_s,
        clean_step_s=clean_step_s,
        decoys=list(job.decoys),
        params=dict(job.params),
    )


def as_telemetry(gpu: Sequence[np.ndarray], ports: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """Readings under their keys, GPU_KEYS then PORT_KEYS (the order samples are dropped in)."""
    return dict(zip((*GPU_KEYS, *PORT_KEYS), (*gpu, *ports), strict=True))


def _pace(
    job: Job, regimes: list[Regime], reg: np.ndarray, edges: np.ndarray, phase_jitter: float
) -> tuple[_Timeline, np.ndarray, np.ndarray, list[GroundTruth]]:
    """How the job steps: its timeline n(t), the step time per interval (with and without the fault) and
    the fault's ground truth."""
    rng = job.rng
    dt = job.sample_s
    T = len(reg)
    mids = edges[1:] - dt / 2
    stop = np.zeros(T)  # share of each interval where the job does not step
    stall = np.zeros(T)  # share where it is stuck inside a step (all ranks)
    for p in job.pauses:
        ov = _overlap(edges[:-1], edges[1:], p.start, p.end) / dt
        if p.stall:
            stall += ov * p.share
        else:
            stop += ov
    stop, stall = np.clip(stop, 0, 1), np.clip(stall, 0, 0.999)
    stall = np.minimum(stall, np.maximum(1.0 - stop - 1e-3, 0.0))

    phase = rng.uniform(0, 2 * np.pi, 2)
    drift = (
        1.0
        + job.drift_amp * np.sin(2 * np.pi * mids / rng.uniform(1800, 7200) + phase[0])
        + 0.4 * job.drift_amp * np.sin(2 * np.pi * mids / rng.uniform(300, 900) + phase[1])
    )
    ramp = np.ones(T)
    if job.ramp is not None:
        r0, extra, tau_r = job.ramp
        ramp = 1.0 + extra * np.exp(-np.clip(mids - r0, 0, None) / tau_r)

    def step_times(plans: list[StepPlan]) -> np.ndarray:
        S = np.array([p.S for p in plans])[reg]
        fixed = np.array([p.fixed for p in plans])[reg]
        return ((S - fixed) * drift * ramp + fixed) / np.maximum(1.0 - stall, 1e-6)

    s_clean = step_times([r.clean for r in regimes])
    f = job.fault
    cover = np.zeros(T)
    s_fault = s_clean
    if f is not None:
        cover = _overlap(edges[:-1], edges[1:], f.onset_s, f.end_s) / dt
        s_fault = step_times([r.faulty or r.clean for r in regimes])
    run = dt * np.clip(1.0 - stop, 0.0, 1.0)  # seconds of the interval the job is in steps (stalls included)
    steps = run * ((1.0 - cover) / s_clean + cover / s_fault)
    paused = (stop >= 0.5) | (stall >= 0.5)  # mostly not stepping: no meaningful step time
    with np.errstate(invalid="ignore", divide="ignore"):
        step_s = np.where(paused | (steps <= 0), np.nan, run / np.where(steps > 0, steps, 1.0))
    clean_step_s = np.where(paused, np.nan, s_clean)
    rate = np.where(run > 0, steps / np.maximum(run, 1e-12), 0.0)
    tl = _Timeline(edges, rate, job.pauses)
    if phase_jitter > 0:
        dn = np.diff(tl.n)
        walk = dn + phase_jitter * np.sqrt(dn) * rng.standard_normal(len(dn))
        tl.n = np.concatenate([[0.0], np.cumsum(np.clip(walk, 0.05 * dn, None))])

    faults: list[GroundTruth] = []
    if f is not None:
        w = cover * (1.0 - stop)
        true = float(np.sum(w * s_fault / s_clean) / np.sum(w) - 1.0) if w.sum() > 0 else 0.0
        faults.append(
            GroundTruth(
                kind=f.kind,
                node=f.node,
                gpu=f.gpu,
                port=f.port,
                onset_s=f.onset_s,
                end_s=f.end_s,
                true_slowdown=true,
                target_slowdown=f.target,
                localisable=f.localisable,
                detail=f.detail,
            )
        )
    return tl, step_s, clean_step_s, faults


def _groups(regimes: list[Regime], reg: np.ndarray) -> list[tuple[Regime, np.ndarray]]:
    """Columns per distinct (clean, faulty) plan pair: regimes sharing plans are measured in one pass."""
    keyed: dict[tuple[int, int], tuple[Regime, list[np.ndarray]]] = {}
    for k in np.unique(reg):
        r = regimes[int(k)]
        key = (id(r.clean), id(r.faulty))
        keyed.setdefault(key, (r, []))[1].append(np.nonzero(reg == k)[0])
    return [(r, np.concatenate(cols)) for r, cols in keyed.values()]


def _windowed(
    job: Job,
    groups: list[tuple[Regime, np.ndarray]],
    tl: _Timeline,
    tau: np.ndarray,
    window_s: float,
    on_rank: np.ndarray,
    nor: np.ndarray,
) -> np.ndarray:
    """(A, R, T): composition of each window, the training part from its regime's step (scaled by its
    share) plus pauses and stalls."""
    rng = job.rng
    t0 = tau - window_s
    n_end = tl(tau)[nor]
    n_start = tl(t0)[nor]
    train = np.zeros((N_ACT, *n_end.shape))
    for r, cols in groups:
        train[:, :, cols] = _segment_comp(r.clean, n_end[:, cols], n_start[:, cols], window_s, rng)
        if r.faulty is None:
            continue
        fcols = cols[on_rank[:, cols].any(axis=0)]
        if len(fcols):
            fc = _segment_comp(r.faulty, n_end[:, fcols], n_start[:, fcols], window_s, rng)
            train[:, :, fcols] = np.where(on_rank[None, :, fcols], fc, train[:, :, fcols])
    share = np.ones(tau.shape)
    extra = np.zeros_like(train)
    ranks = job.fleet.ranks
    for p in job.pauses:
        ov = _overlap(t0, tau, p.start, p.end) / window_s * p.share
        if not ov.any():
            continue
        share -= ov
        cols = np.nonzero(ov.any(axis=0))[0]
        w = ov[nor][:, cols]
        pc = np.broadcast_to(p.comp, (ranks, N_ACT))
        pure = bool(np.all(pc.max(axis=1) > 0.999))
        lam = 1.0 if (pure or p.grain <= 0) else min(1.0, window_s / p.grain)
        sub = w[None] * (lam * pc.T[:, :, None])
        if lam < 1.0:
            _add_draw(sub, w * (1.0 - lam), pc, rng)
        extra[:, :, cols] += sub
    share = np.clip(share, 0.0, 1.0)[nor]
    return train * share[None] + extra


def _gpu_readings(
    job: Job,
    groups: list[tuple[Regime, np.ndarray]],
    tl: _Timeline,
    tau: np.ndarray,
    on_rank: np.ndarray,
    nor: np.ndarray,
) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """(tensor, sm, util, power, clock, reasons) as each is measured, before noise, and each interval's
    mean power (what heats the die)."""
    rng = job.rng
    R, T = on_rank.shape
    f = job.fault
    fault_fleet = job.fleet_fault
    util_t, sm_t, tensor_t = value_tables(job.fleet)
    _, sm_ft, tensor_ft = value_tables(fault_fleet or job.fleet)
    ec, ef = job.elec_clean, job.elec_fault or job.elec_clean

    def by_state(table_c: np.ndarray, table_f: np.ndarray, comp: np.ndarray) -> np.ndarray:
        vc = np.einsum("art,ar->rt", comp, table_c)
        if f is None or not on_rank.any() or table_f is table_c:
            return vc
        return np.where(on_rank, np.einsum("art,ar->rt", comp, table_f), vc)

    # DCGM profiling gauges: whole-interval averages
    comp = _windowed(job, groups, tl, tau, job.sample_s, on_rank, nor)
    tensor = 100.0 * by_state(tensor_t, tensor_ft if fault_fleet is not None else tensor_t, comp)
    sm = 100.0 * by_state(sm_t, sm_ft if fault_fleet is not None else sm_t, comp)
    p_mean = by_state(ec.p_act, ef.p_act, comp)  # the heat the die sheds over the interval
    comp = _windowed(job, groups, tl, tau, job.util_window_s, on_rank, nor)
    util = 100.0 * np.einsum("art,a->rt", comp, util_t)
    comp = _windowed(job, groups, tl, tau, job.power_window_s, on_rank, nor)
    power = by_state(ec.p_act, ef.p_act, comp)
    comp = _windowed(job, groups, tl, tau, 0.005, on_rank, nor)
    act = np.argmax(comp, axis=0)  # (R, T) activity at the read
    del comp
    ri = np.arange(R)[:, None]
    clock = np.where(on_rank, ef.clock_act[act, ri], ec.clock_act[act, ri])
    bits = np.where(on_rank, ef.bits_act[act, ri], ec.bits_act[act, ri])
    if f is not None and job.elec_fault is not None:
        hot = on_rank & (rng.random((R, T)) < 0.93)
        bits = np.where(hot, bits | ef.sticky_bits[:, None], bits)
        hw = on_rank & (rng.random((R, T)) < ef.hw_duty[:, None]) & (act != DEEP)
        clock = np.where(hw, ef.f_hw, clock)
        bits = np.where(hw, bits | HW_THERMAL | HW_SLOWDOWN, bits)
    capped = (bits & 0x24) != 0
    clock = clock * np.where((act == COMPUTE) & capped, 1.0 + rng.normal(0, 0.012, (R, T)), 1.0)
    clock = np.minimum(np.round(clock / 15.0) * 15.0, job.fleet.kind.fmax)  # the clock moves in 15 MHz bins
    return (tensor, sm, util, power, clock, bits.astype(float)), p_mean


def thermal_lag(fleet: Fleet, p_mean: np.ndarray, dt: float) -> np.ndarray:
    """(R, T) die temperature: a first-order lag of each interval's mean power, from an idle die's."""
    t_eq = fleet.t_inlet[:, None] + fleet.r_th[:, None] * p_mean
    a = np.exp(-dt / fleet.tau_th)
    temp = np.empty_like(t_eq)
    cur = fleet.t_inlet + fleet.r_th * fleet.p_deep
    for i in range(t_eq.shape[1]):
        cur = a * cur + (1 - a) * t_eq[:, i]
        temp[:, i] = cur
    return temp


def _temperature(job: Job, p_mean: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """Integer degrees: the lag of the mean power, and a thermal fault's die held at its temperature."""
    rng = job.rng
    fl = job.fleet
    temp = thermal_lag(fl, p_mean, job.sample_s)
    R, T = temp.shape
    f = job.fault
    if f is not None and f.kind == "thermal" and f.gpu is not None:
        r = f.node * job.gpus_per_node + f.gpu
        shape = np.zeros(T)
        t = tau[f.node]
        rising = (t >= f.onset_s - f.ramp_s) & (t < f.onset_s)
        shape[rising] = ((t[rising] - (f.onset_s - f.ramp_s)) / max(f.ramp_s, 1e-9)) ** 1.5
        held = (t >= f.onset_s) & (t < f.end_s)
        shape[held] = 1.0
        after = t >= f.end_s
        shape[after] = np.exp(-(t[after] - f.end_s) / fl.tau_th)
        wobble = np.where(held, rng.normal(0, 0.8, T) + 1.2 * np.sin(t / 7.0), 0.0)
        temp[r] = temp[r] + shape * (f.thermal_c + wobble - temp[r])
    return np.round(temp + rng.normal(0, 0.4, (R, T)))


def _gauge_noise(
    job: Job,
    tensor: np.ndarray,
    sm: np.ndarray,
    util: np.ndarray,
    power: np.ndarray,
    clock: np.ndarray,
    bits: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """Measurement noise: multiplicative on the gauges, a per-board power sensor offset."""
    rng = job.rng
    R, T = len(power), power.shape[1]
    noise = job.noise
    fl = job.fleet
    power = power * rng.normal(1.0, 0.015, R)[:, None] * (1.0 + rng.normal(0, min(noise, 0.02), (R, T)))  # ~2% sensor
    tensor = tensor * (1.0 + rng.normal(0, noise, (R, T)))
    sm = sm * (1.0 + rng.normal(0, noise, (R, T)))
    u = util / 100.0
    util = util + 100.0 * rng.normal(0, 1, (R, T)) * noise * np.sqrt(np.clip(u * (1 - u), 0, None)) * 2
    util = np.round(np.clip(util, 0, 100))
    tensor = np.clip(tensor, 0, 100)
    sm = np.clip(np.maximum(sm, tensor), 0, 100)
    power = np.round(np.clip(power, 0.5 * fl.p_deep.min(), 1.04 * fl.kind.limit_w), 2)
    return tensor, sm, util, power, clock, bits


def _progress(p: StepPlan, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bytes sent and seconds waited by every port after n (P, C) steps of plan p."""
    fl_n = np.floor(n)
    fr = n - fl_n
    sent = np.zeros(n.shape)
    waited = np.zeros(n.shape)
    for k in range(p.port_bytes.shape[0]):
        a0, a1 = p.port_bounds[k, 0][:, None], p.port_bounds[k, 1][:, None]
        g = fl_n + np.clip((fr - a0) / np.maximum(a1 - a0, 1e-9), 0.0, 1.0)
        sent += p.port_bytes[k][:, None] * g
        waited += p.port_wait[k][:, None] * g
    return sent, waited


def _port_readings(
    job: Job,
    groups: list[tuple[Regime, np.ndarray]],
    tl: _Timeline,
    tau: np.ndarray,
    fault_on: np.ndarray,
    clip_sent: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(xmit_bytes, xmit_wait, rate_gbps) of every port, read with its node's GPUs."""
    rng = job.rng
    pn = job.port_node
    P, T = len(pn), tau.shape[1]
    tau_p = tau[pn]
    on_p = fault_on[pn]
    prev_tau = np.concatenate([np.zeros((P, 1)), tau_p[:, :-1]], axis=1)
    n_now, n_prev = tl(tau_p), tl(prev_tau)
    d_bytes = np.zeros((P, T))
    d_wait = np.zeros((P, T))
    for rg, cols in groups:
        b1, w1 = _progress(rg.clean, n_now[:, cols])
        b0, w0 = _progress(rg.clean, n_prev[:, cols])
        d_bytes[:, cols], d_wait[:, cols] = b1 - b0, w1 - w0
        if rg.faulty is not None and on_p[:, cols].any():
            fb1, fw1 = _progress(rg.faulty, n_now[:, cols])
            fb0, fw0 = _progress(rg.faulty, n_prev[:, cols])
            on = on_p[:, cols]
            d_bytes[:, cols] = np.where(on, fb1 - fb0, d_bytes[:, cols])
            d_wait[:, cols] = np.where(on, fw1 - fw0, d_wait[:, cols])
    for p in job.pauses:
        if p.port_bytes_s is None and p.port_wait_s is None:
            continue
        ov = _overlap(prev_tau, tau_p, p.start, p.end)
        if p.port_bytes_s is not None:
            d_bytes += ov * p.port_bytes_s[:, None]
        if p.port_wait_s is not None:
            d_wait += ov * p.port_wait_s[:, None]
    d_bytes += (tau_p - prev_tau) * job.background_bytes_s * np.exp(rng.normal(0, 0.3, (P, T)))
    d_wait = np.maximum(d_wait, 0.0) * WAIT_TICK_HZ
    xmit_bytes, xmit_wait = port_counters(rng, np.maximum(d_bytes, 0.0) if clip_sent else d_bytes, d_wait)
    rate_gbps = np.repeat(job.rate_gbps[:, None].astype(float), T, axis=1)
    f = job.fault
    if f is not None and f.port is not None and f.rate_factor != 1.0:
        rate_gbps[f.port] = np.where(on_p[f.port], job.rate_gbps[f.port] * f.rate_factor, rate_gbps[f.port])
    return xmit_bytes, xmit_wait, rate_gbps


def port_counters(rng: np.random.Generator, sent: np.ndarray, wait_ticks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative xmit_bytes and xmit_wait (P, T) from each interval's bytes and credit-wait ticks, from
    what every port had counted before the job."""
    P = len(sent)
    xmit_bytes = np.floor(rng.uniform(1e12, 5e14, P)[:, None] + np.cumsum(sent, axis=1))
    xmit_wait = np.floor(rng.uniform(1e9, 1e12, P)[:, None] + np.cumsum(np.round(wait_ticks), axis=1))
    return xmit_bytes, xmit_wait


def _drop(job: Job, tel: dict[str, np.ndarray], nor: np.ndarray, pn: np.ndarray, T: int) -> None:
    """Missed scrapes: whole nodes (GPUs and NICs together), now and then an exporter outage of minutes
    on one node, and single fields that came back empty."""
    rng = job.rng
    missed = rng.random((job.nodes, T)) < job.drop_rate
    if job.nodes > 2 and rng.random() < 0.3:
        n = int(rng.integers(job.nodes))
        start = int(rng.integers(T))
        missed[n, start : start + max(1, int(rng.uniform(60, 600) / job.sample_s))] = True
        job.decoys.append("exporter_outage")
    for key, arr in tel.items():
        rows = nor if key in GPU_KEYS else pn
        mask = missed[rows] | (rng.random(arr.shape) < job.drop_rate * 0.1)
        arr[mask] = np.nan


# ---------------------------------------------------------------------------------------------------------
# fault calibration


def calibrate(
    slowdown: Callable[[float], float], target: float, lo: float = 0.0, hi: float = 1.0, iters: int = 40
) -> float:
    """Smallest intensity in [lo, hi] whose slowdown reaches the target, by bisection (slowdown rises
    with intensity); hi when even that falls short."""
    if slowdown(hi) < target:
        return hi
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if slowdown(mid) < target:
            lo = mid
        else:
            hi = mid
    return hi
