"""The engine's measurement layer for a job whose step changes while it runs: a sequence of regimes.

`_engine.render` takes one clean step and one faulty step for the whole job. Some jobs change their step
as they go (a mixture of experts whose hot experts drift from rank to rank, a host whose optimizer phase
slows while checkpoints are flushed), and a fault's cost then depends on when it strikes: a slower GPU
costs little while its experts are cold and a lot while they are hot. Here the job is cut into regimes,
stretches aligned to the sample grid, each with its own clean step and, where the fault is on, its own
faulty step. Everything else is measured exactly as in `_engine` (its windows, noise, temperature lag,
counters and dropped samples, reused from there), each sample within the regime of its interval.

Steps jitter, so the phase of the step at a read wanders from sample to sample (`phase_jitter`) rather
than strobing at one phase when the scrape interval is near a multiple of the step.

A fault may also change what a GPU's activities read (`fault_fleet`): a GPU stalled on its memory spends
more time in the same kernels, so its tensor pipes are busy a smaller share of its compute time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscope.bench.workloads import Case, GroundTruth
from gpuscope.bench.workloads._engine import (
    WAIT_TICK_HZ,
    Job,
    Pause,
    StepPlan,
    _add_draw,
    _drop,
    _overlap,
    _segment_comp,
    _Timeline,
    onehot,
)
from gpuscope.bench.workloads._gpu import COMPUTE, DEEP, HW_SLOWDOWN, HW_THERMAL, N_ACT, Fleet, value_tables


@dataclass
class Regime:
    start: float  # s, a multiple of the sample interval (the first regime starts at 0)
    clean: StepPlan
    faulty: StepPlan | None = None  # the step while the job's fault is on, where it overlaps this regime


def regime_edges(duration_s: float, sample_s: float, every_s: float) -> np.ndarray:
    """Regime starts every ~every_s seconds on the sample grid, from 0."""
    step = max(1, round(every_s / sample_s)) * sample_s
    return np.arange(0.0, duration_s, step)


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
    """(A, R, T): composition of each window, the training part from its regime's step (as _engine)."""
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


def _progress(p: StepPlan, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bytes sent and seconds waited by every port after n (P, C) steps of plan p (as _engine does)."""
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


def render_regimes(
    job: Job, regimes: list[Regime], fault_fleet: Fleet | None = None, phase_jitter: float = 0.0
) -> Case:
    """Render `job` (its clean/faulty plans are ignored) with the step of each regime in turn. phase_jitter:
    the per-step relative spread of step times, which makes the phase of the step at each read wander
    (a random walk in the step count, sd phase_jitter * sqrt(steps)) instead of strobing at a fixed one."""
    rng = job.rng
    dt = job.sample_s
    T = int(job.duration_s // dt)
    times = dt * (1.0 + np.arange(T))
    edges = np.concatenate([[0.0], times])
    nodes, gpn = job.nodes, job.gpus_per_node
    R = nodes * gpn
    nor = np.repeat(np.arange(nodes), gpn)
    mids = times - dt / 2
    starts = np.array([r.start for r in regimes])
    reg = np.clip(np.searchsorted(starts, mids, side="right") - 1, 0, len(regimes) - 1)

    job.pauses = [Pause(-1e9, 0.0, onehot(DEEP), name="before the job"), *job.pauses]
    stop = np.zeros(T)
    stall = np.zeros(T)
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
    run = dt * np.clip(1.0 - stop, 0.0, 1.0)
    steps = run * ((1.0 - cover) / s_clean + cover / s_fault)
    paused = (stop >= 0.5) | (stall >= 0.5)
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

    offset = rng.uniform(0.0, min(dt, 1.0) * 0.9, nodes)
    tau = np.clip(times[None, :] - offset[:, None] - rng.uniform(0, 0.02, (nodes, T)), 1e-3, None)
    fault_on = np.zeros((nodes, T), dtype=bool)
    if f is not None:
        fault_on = (tau >= f.onset_s) & (tau < f.end_s)
    on_rank = fault_on[nor]
    groups = _groups(regimes, reg)

    util_t, sm_t, tensor_t = value_tables(job.fleet)
    _, sm_ft, tensor_ft = value_tables(fault_fleet or job.fleet)
    ec, ef = job.elec_clean, job.elec_fault or job.elec_clean

    def by_state(table_c: np.ndarray, table_f: np.ndarray, comp: np.ndarray) -> np.ndarray:
        vc = np.einsum("art,ar->rt", comp, table_c)
        if f is None or not on_rank.any() or table_f is table_c:
            return vc
        return np.where(on_rank, np.einsum("art,ar->rt", comp, table_f), vc)

    comp = _windowed(job, groups, tl, tau, dt, on_rank, nor)
    tensor = 100.0 * by_state(tensor_t, tensor_ft if fault_fleet is not None else tensor_t, comp)
    sm = 100.0 * by_state(sm_t, sm_ft if fault_fleet is not None else sm_t, comp)
    p_mean = by_state(ec.p_act, ef.p_act, comp)
    comp = _windowed(job, groups, tl, tau, job.util_window_s, on_rank, nor)
    util = 100.0 * np.einsum("art,a->rt", comp, util_t)
    comp = _windowed(job, groups, tl, tau, job.power_window_s, on_rank, nor)
    power = by_state(ec.p_act, ef.p_act, comp)
    comp = _windowed(job, groups, tl, tau, 0.005, on_rank, nor)
    act = np.argmax(comp, axis=0)
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
    clock = np.minimum(np.round(clock / 15.0) * 15.0, job.fleet.kind.fmax)

    fl = job.fleet
    t_eq = fl.t_inlet[:, None] + fl.r_th[:, None] * p_mean
    a = np.exp(-dt / fl.tau_th)
    temp = np.empty_like(t_eq)
    cur = fl.t_inlet + fl.r_th * fl.p_deep
    for i in range(T):
        cur = a * cur + (1 - a) * t_eq[:, i]
        temp[:, i] = cur
    if f is not None and f.kind == "thermal" and f.gpu is not None:
        r = f.node * gpn + f.gpu
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
    temp = np.round(temp + rng.normal(0, 0.4, (R, T)))

    noise = job.noise
    power = power * rng.normal(1.0, 0.015, R)[:, None] * (1.0 + rng.normal(0, min(noise, 0.02), (R, T)))
    tensor = tensor * (1.0 + rng.normal(0, noise, (R, T)))
    sm = sm * (1.0 + rng.normal(0, noise, (R, T)))
    u = util / 100.0
    util = util + 100.0 * rng.normal(0, 1, (R, T)) * noise * np.sqrt(np.clip(u * (1 - u), 0, None)) * 2
    util = np.round(np.clip(util, 0, 100))
    tensor = np.clip(tensor, 0, 100)
    sm = np.clip(np.maximum(sm, tensor), 0, 100)
    power = np.round(np.clip(power, 0.5 * fl.p_deep.min(), 1.04 * fl.kind.limit_w), 2)

    pn = job.port_node
    P = len(pn)
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
    xmit_bytes = np.floor(rng.uniform(1e12, 5e14, P)[:, None] + np.cumsum(np.maximum(d_bytes, 0.0), axis=1))
    xmit_wait = np.floor(rng.uniform(1e9, 1e12, P)[:, None] + np.cumsum(np.round(d_wait), axis=1))
    rate_gbps = np.repeat(job.rate_gbps[:, None].astype(float), T, axis=1)
    if f is not None and f.port is not None and f.rate_factor != 1.0:
        rate_gbps[f.port] = np.where(on_p[f.port], job.rate_gbps[f.port] * f.rate_factor, rate_gbps[f.port])

    telemetry = {
        "tensor_active_pct": tensor,
        "sm_active_pct": sm,
        "util_pct": util,
        "power_w": power,
        "sm_clock_mhz": clock,
        "clock_event_reasons": bits.astype(float),
        "temp_c": temp,
        "xmit_bytes": xmit_bytes,
        "xmit_wait": xmit_wait,
        "rate_gbps": rate_gbps,
    }
    _drop(job, telemetry, nor, pn, T)
    return Case(
        family=job.family,
        seed=job.seed,
        nodes=nodes,
        gpus_per_node=gpn,
        sample_s=dt,
        duration_s=job.duration_s,
        times=times,
        telemetry=telemetry,
        port_node=pn.copy(),
        port_gpu=job.port_gpu.copy(),
        faults=faults,
        step_s=step_s,
        clean_step_s=clean_step_s,
        decoys=list(job.decoys),
        params=dict(job.params),
    )
