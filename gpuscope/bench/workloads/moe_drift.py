"""moe_drift: mixture-of-experts training with expert parallelism across nodes, whose hot experts drift.

Layout. N nodes x 8 GPUs. The experts of every MoE layer are spread over an expert-parallel (EP) group of
g nodes (8g ranks, `epr` experts each); the dense weights (attention, router) are replicated and their
gradients all-reduced over every rank at the end of the backward (data parallel), the experts' over the
groups' replicas. Each node has one NIC, or one per GPU (rail-optimised, PXN: a GPU reaches rank j of
another node through rail j, the NVLink hop first).

Step. Per layer, forward and then backward (kappa x the compute): the dense part (d per rank, a little
per-step jitter), the dispatch all-to-all (tokens to the ranks of their experts), the expert part (e x
lambda: the load the rank's experts get relative to a balanced router, with per-step token noise nu),
the combine all-to-all. The all-to-alls are barriers inside the EP group: each phase lasts as long as
its slowest rank, ranks done early spin in NCCL's kernel (util 100%, a few SMs, no tensor work). Groups
run free of each other until the gradient all-reduce, where the slower group makes the others spin.
Step time is the sum over layers of expected maxima (over a fixed set of draws per seed): it follows
the hottest rank. A capacity factor (where the job uses one) drops the tokens above it.

The router's drift. An expert's popularity is a random walk (Ornstein-Uhlenbeck in log space, minutes
to tens of minutes), partly shared by the expert across layers (the job places co-activated experts
together, so a shift in the data heats a whole rank), plus surges: an expert gaining traffic over a few
minutes and losing it again. Loads are renormalised per layer within each group (tokens are conserved).
The job is cut into regimes of 1-2 minutes (`_regimes`), each with its own step: the hot ranks compute
more at normal clocks (more tensor activity), everybody else spins longer; the hot rank's port receives
more in the dispatch and sends more in the combine; the ports sending to it wait for credits (its
ingress is oversubscribed, the switch back-pressures them). All of this is in the clean step time.

Network. A port's all-to-all time is max(sent / egress rate, received / ingress rate); the group's
all-to-all lasts as long as its busiest port. A sender waits for credits on what it sends to a receiver
busier than itself (bytes-weighted), plus a small incast baseline. The gradient all-reduce is a ring
per rail over all nodes at its slowest link, mostly hidden under the backward.

Faults (one, 3-40 min, calibrated so the job slows by the target on average over the window; placed on
a rank that is hot in the window, one that is cold, or any):
- thermal / power_cap: a GPU computes slower at a lower clock (0x20 / 0x4); on a cold rank the expert
  phases absorb part of it (its experts had slack), on a hot one it adds to the critical path at once;
- gpu_degraded: a GPU slower at normal clocks (HBM stalls, row remapping): it computes longer with no
  reason bit, its tensor pipes busy a smaller share of its compute time, less power, so a GPU capped like
  its peers may even clock higher;
- slow_nic: a link trained at a lower rate (rate_gbps drops, ports sending to it wait for credits), or a
  credit-stalled port (its receiver side back-pressures: its own xmit_wait rises, its rate unchanged);
  every all-to-all of its group and the ring wait for it;
- slow_host: a node's CPUs launch late after every all-to-all's split-size sync: its GPUs idle, the
  others spin.
Decoys: the drift itself (hot ranks moving over minutes), expert surges, tokens dropped at the capacity
factor, checkpoints (the job stops), healthy GPUs at their power limit, a slow die, a hot slot, a noisy
port, an exporter outage.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscope.bench.workloads import Case
from gpuscope.bench.workloads._common import (
    design,
    draw_duration,
    draw_window,
    fleet_decoys,
    log_uniform_int,
    noisy_port,
    pick_fault,
    rng_for,
)
from gpuscope.bench.workloads._dp import _init, ports_of
from gpuscope.bench.workloads._engine import Job, Pause, StepPlan, draw_measurement, mix, onehot, plan
from gpuscope.bench.workloads._faults import host_gaps, memory_stalls, nic_detail, nic_modes, nic_shares, record
from gpuscope.bench.workloads._gpu import (
    COMPUTE,
    IDLE,
    LIGHT,
    N_ACT,
    SPIN,
    XFER,
    Electrical,
    Fleet,
    draw_fleet,
    electrical,
)
from gpuscope.bench.workloads._regimes import Regime, regime_edges, render_regimes

FAMILY = "moe_drift"
N_MC = 16  # draws of per-step token noise and jitter the expected maxima are taken over
LAYERS_MODELLED = 4  # distinct layers modelled; each stands for L / LAYERS_MODELLED of the job's layers
LAM_MIN = 0.05  # a rank's experts never get less than this share of a balanced load
SAMPLES = (5.0, 10.0, 15.0, 20.0, 30.0)
CALIBRATION_REGIMES = 8  # regimes of the fault window the calibration averages over


@dataclass
class Moe:
    nodes: int
    gpn: int
    g: int  # nodes per EP group
    rails: bool
    L: int  # MoE layers
    kappa: float  # backward compute / forward compute
    d0: float  # dense seconds per layer (forward) at the top clock
    e0: float  # expert seconds per layer (forward) at the top clock and a balanced load
    sigma: float  # per-step jitter of the dense compute
    nu: float  # per-step token noise of a rank's expert load
    cap: float  # capacity factor (inf: dropless)
    h0: np.ndarray  # (R,) host launch gap per compute phase
    a2a_bytes: float  # inter-node bytes one rank sends in a balanced dispatch
    a2a_lat: float
    ar_bytes: float  # bytes per port per step in the gradient all-reduce ring
    hop_s: float
    eta: float
    beta: float  # share of the backward that can hide the all-reduce
    lam_exp: float  # share of the all-reduce never hidden (the last bucket)
    opt_s: float
    rate_gbps: np.ndarray  # (P,)
    w_a2a: np.ndarray  # (P,) baseline credit wait per all-to-all transmit second (incast)
    w_ring: np.ndarray  # (P,) baseline credit wait per ring transmit second
    z: np.ndarray  # (N_MC, LAYERS_MODELLED, R) token noise draws
    zd: np.ndarray  # (N_MC, LAYERS_MODELLED, R) dense jitter draws, centred per rank

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpn

    @property
    def groups(self) -> int:
        return self.nodes // self.g

    @property
    def rails_n(self) -> int:
        return self.gpn if self.rails else 1

    @property
    def ports(self) -> int:
        return self.nodes * self.rails_n

    def group_of_rank(self) -> np.ndarray:
        return np.arange(self.ranks) // (self.g * self.gpn)


@dataclass
class Steps:
    """The step of K regimes in one fault state."""

    S: np.ndarray  # (K,)
    fixed: np.ndarray  # (K,) seconds of S that do not scale with the compute drift
    Tf: np.ndarray  # (K, G) forward of each group
    Tb: np.ndarray  # (K, G) backward
    t_exp: np.ndarray  # (K,) exposed all-reduce
    secs_f: np.ndarray  # (K, R, A) seconds per activity in the forward
    secs_b: np.ndarray  # (K, R, A) and in the backward
    bytes_f: np.ndarray  # (K, P) bytes per step in the forward
    wait_f: np.ndarray  # (K, P) seconds of credit wait in the forward
    bytes_b: np.ndarray  # (K, P) in the backward, the all-reduce included
    wait_b: np.ndarray  # (K, P)


def _others(x: np.ndarray, g: int) -> np.ndarray:
    """Mean over the other nodes of the group (axis -2 of (..., G, g, c))."""
    return (x.sum(axis=-2, keepdims=True) - x) / (g - 1)


def _a2a(
    tx: np.ndarray, rx: np.ndarray, txr: np.ndarray, rxr: np.ndarray, link: np.ndarray, g: int, to_receivers: bool
) -> tuple[np.ndarray, np.ndarray]:
    """One all-to-all over (..., G, g, c) ports: its duration per group (..., G) and each port's credit
    wait. A sender spreads its bytes over the other nodes of its group (same rail) in proportion to what
    they receive (dispatch) or evenly (combine), and waits on the share sent to a receiver still busy
    when it has sent everything else. A credit-stalled port (egress below its link rate) also waits
    for all it sends."""
    t_send = tx / txr
    t_recv = rx / rxr
    dur = np.maximum(t_send, t_recv).max(axis=(-2, -1))
    late = np.maximum(t_recv[..., None, :, :] - t_send[..., :, None, :], 0.0)  # (..., G, g_from, g_to, c)
    w = rx[..., None, :, :] if to_receivers else np.ones_like(late)
    eye = np.eye(g, dtype=bool)[:, :, None]
    w = np.where(eye, 0.0, w)
    share = w / np.maximum(w.sum(axis=-2, keepdims=True), 1e-30)
    wait = (share * late).sum(axis=-2) + tx * np.maximum(1.0 / txr - 1.0 / link, 0.0)
    return dur, wait


def evaluate(
    m: Moe,
    fleet: Fleet,
    elec: Electrical,
    lam: np.ndarray,
    *,
    deg: np.ndarray | None = None,
    host_extra: np.ndarray | None = None,
    txf: np.ndarray | None = None,
    rxf: np.ndarray | None = None,
) -> Steps:
    """The step of each regime, lam (K, Lm, R) its mean expert loads; deg (R,) a compute time multiplier
    at normal clocks, host_extra (R,) extra launch gap, txf / rxf (P,) egress rate and trained link rate
    of each port as shares of nominal."""
    K, Lm, R = lam.shape
    G, gr, g, c = m.groups, m.g * m.gpn, m.g, m.rails_n
    N = m.nodes
    w_l = m.L / Lm
    slow = fleet.het / elec.speed * (1.0 if deg is None else deg)
    d, e = m.d0 * slow, m.e0 * slow
    h = m.h0 if host_extra is None else m.h0 + host_extra

    lam_s = np.clip(lam[:, None] * (1.0 + m.nu * m.z[None]), LAM_MIN, m.cap)  # (K, MC, Lm, R)
    lbar = lam_s.mean(axis=1)  # (K, Lm, R)
    jit = 1.0 + m.sigma * m.zd

    def wall(x: np.ndarray) -> np.ndarray:  # expected slowest rank of each group, (..., Lm, G)
        return x.reshape(*x.shape[:-1], G, gr).max(axis=-1).mean(axis=-3)

    dense_f, dense_b = wall(h + d * jit), wall(h + m.kappa * d * jit)  # (Lm, G)
    expert_f, expert_b = wall(h + e * lam_s), wall(h + m.kappa * e * lam_s)  # (K, Lm, G)

    # all-to-alls, per port: (K, Lm, G, g, c)
    rate = m.rate_gbps * 1e9 / 8
    txr = (rate * (1.0 if txf is None else txf)).reshape(G, g, c)
    link = (rate * (1.0 if rxf is None else rxf)).reshape(G, g, c)
    rxr = link
    B = m.a2a_bytes
    lam_c = np.clip(lam, LAM_MIN, m.cap).reshape(K, Lm, G, g, m.gpn)
    if m.rails:
        disp_rx = B * lam_c
        disp_tx = B * _others(lam_c, g)
        comb_tx = np.broadcast_to(B * lam_c.mean(axis=-1, keepdims=True), disp_rx.shape)
    else:
        disp_rx = B * lam_c.sum(axis=-1, keepdims=True)
        disp_tx = np.full_like(disp_rx, B * m.gpn)
        comb_tx = disp_rx
    comb_rx = _others(comb_tx, g)
    dur_d, wait_d = _a2a(disp_tx, disp_rx, txr, rxr, link, g, True)
    dur_c, wait_c = _a2a(comb_tx, comb_rx, txr, rxr, link, g, False)
    A = (dur_d + dur_c) / m.eta + 2 * m.a2a_lat  # (K, Lm, G) one layer's dispatch and combine
    a2a_bytes = ((disp_tx + comb_tx).sum(axis=1) * w_l).reshape(K, N * c)  # per pass, all layers
    base_wait = m.w_a2a.reshape(G, g, c) * (disp_tx + comb_tx) / txr
    a2a_wait = ((wait_d + wait_c + base_wait).sum(axis=1) * w_l).reshape(K, N * c)

    # the gradient all-reduce: a ring per rail over all nodes, hidden under the backward but its last bucket
    txr_p, link_p = txr.reshape(N, c), link.reshape(N, c)
    nxt = np.roll(np.arange(N), -1)
    ring = np.minimum(txr_p, link_p[nxt])  # what each port can push to its ring successor
    t_ar = m.ar_bytes / (ring.min(axis=0).min() * m.eta) + 2 * (N - 1) * m.hop_s
    Tf = w_l * (dense_f + expert_f + A).sum(axis=1)  # (K, G)
    Tb = w_l * (dense_b + expert_b + A).sum(axis=1)
    t_exp = np.maximum(t_ar - m.beta * Tb.min(axis=1), m.lam_exp * t_ar)
    ring_wait = m.ar_bytes * (
        np.maximum(1.0 / ring - 1.0 / txr_p, 0.0)
        + np.maximum(1.0 / txr_p - 1.0 / link_p, 0.0)
        + m.w_ring.reshape(N, c) / link_p
    ).reshape(-1)

    T = Tf + Tb
    S = T.max(axis=1) + t_exp + m.opt_s
    fixed = 2 * w_l * A.sum(axis=1).max(axis=1) + t_exp

    grp = m.group_of_rank()

    def secs(k: float, Tx: np.ndarray) -> np.ndarray:
        out = np.zeros((K, R, N_ACT))
        out[:, :, COMPUTE] = w_l * k * (Lm * d + e * lbar.sum(axis=1))
        out[:, :, IDLE] = w_l * Lm * 2 * h
        out[:, :, XFER] = (w_l * A.sum(axis=1))[:, grp]
        out[:, :, SPIN] = np.maximum(Tx[:, grp] - out.sum(axis=2), 0.0)
        return out

    return Steps(
        S=S,
        fixed=fixed,
        Tf=Tf,
        Tb=Tb,
        t_exp=t_exp,
        secs_f=secs(1.0, Tf),
        secs_b=secs(m.kappa, Tb),
        bytes_f=a2a_bytes,
        wait_f=a2a_wait,
        bytes_b=a2a_bytes + m.ar_bytes,
        wait_b=a2a_wait + ring_wait[None, :],
    )


def plans(m: Moe, st: Steps) -> list[StepPlan]:
    """One StepPlan per regime: forward, backward (mixed, a layer's alternation as grain), the wait for
    the slowest group, the exposed all-reduce, the optimizer."""
    out = []
    grp = m.group_of_rank()
    port_grp = np.repeat(np.arange(m.nodes), m.rails_n) // m.g
    R, P = m.ranks, m.ports
    for k in range(len(st.S)):
        Tf, Tb = st.Tf[k], st.Tb[k]
        train = float(np.max(Tf + Tb))
        comp_f = st.secs_f[k] / np.maximum(st.secs_f[k].sum(axis=1, keepdims=True), 1e-12)
        comp_b = st.secs_b[k] / np.maximum(st.secs_b[k].sum(axis=1, keepdims=True), 1e-12)
        segments = [
            (Tf[grp], comp_f, float(Tf.mean()) / m.L),
            (Tb[grp], comp_b, float(Tb.mean()) / m.L),
            (train - (Tf + Tb)[grp], onehot(SPIN), 0.0),
            (np.full(R, st.t_exp[k]), onehot(XFER), 0.0),
            (np.full(R, m.opt_s), onehot(LIGHT), 0.0),
        ]
        fwd_end = Tf[port_grp]
        ports = [
            (np.zeros(P), fwd_end, st.bytes_f[k], st.wait_f[k]),
            (fwd_end, np.full(P, train + st.t_exp[k]), st.bytes_b[k], st.wait_b[k]),
        ]
        out.append(plan(float(st.S[k]), float(st.fixed[k]), segments, ports, R))
    return out


# ---------------------------------------------------------------------------------------------------------
# drawing a job and its router's drift


def draw(rng: np.random.Generator) -> tuple[Moe, Fleet, list[str]]:
    nodes = log_uniform_int(rng, 2, 32)
    gpn = 8
    fleet = draw_fleet(rng, nodes, gpn)
    R = nodes * gpn
    decoys = ["expert_drift"]
    decoys += fleet_decoys(rng, fleet)
    g = int(rng.choice([k for k in range(2, 9) if nodes % k == 0] or [nodes]))
    rails = bool(rng.random() < 0.5)
    rails_n = gpn if rails else 1
    P = nodes * rails_n
    L = log_uniform_int(rng, 12, 48)
    kappa = 3.0 if rng.random() < 0.4 else 2.0
    c_step = float(np.exp(rng.uniform(np.log(1.5), np.log(12.0))))  # compute seconds per step at fmax
    f0 = c_step / (L * (1 + kappa))
    phi = float(rng.uniform(0.35, 0.75))  # the experts' share of a layer's compute
    link = 400.0 if rng.random() < 0.7 else 200.0
    rate = link * 1e9 / 8
    eta = float(rng.uniform(0.7, 0.9))
    hop = float(rng.uniform(5e-6, 2e-5))
    rho_a2a = rng.uniform(0.15, 0.6)  # a balanced dispatch's time / the layer's forward expert compute
    rho_ar = rng.uniform(0.05, 0.4)  # the gradient all-reduce / the backward compute
    t_ar = rho_ar * kappa * c_step / (1 + kappa)
    ar_time = max(t_ar - 2 * (nodes - 1) * hop, 0.2 * t_ar)
    w_ring = rng.uniform(0.002, 0.03, P)
    decoys += noisy_port(rng, w_ring)
    zd = rng.standard_normal((N_MC, LAYERS_MODELLED, R))
    m = Moe(
        nodes=nodes,
        gpn=gpn,
        g=g,
        rails=rails,
        L=L,
        kappa=kappa,
        d0=(1 - phi) * f0,
        e0=phi * f0,
        sigma=float(rng.uniform(0.01, 0.04)),
        nu=float(rng.uniform(0.02, 0.06)),
        cap=np.inf if rng.random() < 0.7 else float(rng.uniform(1.5, 2.5)),
        h0=0.5 * f0 * rng.uniform(0.0, 0.02) * rng.uniform(0.5, 1.5, R),
        a2a_bytes=float(rho_a2a * phi * f0 * rate * eta * rails_n / gpn),
        a2a_lat=float(rng.uniform(2e-5, 8e-5)),
        ar_bytes=float(ar_time * rate * eta),
        hop_s=hop,
        eta=eta,
        beta=float(rng.uniform(0.2, 0.8)),
        lam_exp=float(rng.uniform(0.05, 0.25)),
        opt_s=float(rng.uniform(0.01, 0.04) * c_step),
        rate_gbps=np.full(P, link),
        w_a2a=rng.uniform(0.02, 0.1, P),
        w_ring=w_ring,
        z=rng.standard_normal((N_MC, LAYERS_MODELLED, R)),
        zd=zd - zd.mean(axis=0, keepdims=True),
    )
    if np.isfinite(m.cap):
        decoys.append("capacity_drops")
    return m, fleet, decoys


@dataclass
class Surge:
    start: float
    end: float
    expert: int
    ranks: list[int]
    amp: float  # peak gain of the expert's popularity, log


def _ou(rng: np.random.Generator, K: int, shape: tuple[int, ...], a: float, sd: float) -> np.ndarray:
    """K steps of a stationary Ornstein-Uhlenbeck walk with lag-one correlation a and sd `sd`."""
    out = np.empty((K, *shape))
    x = rng.normal(0.0, sd, shape)
    kick = rng.normal(0.0, sd * np.sqrt(1 - a * a), (K, *shape))
    for k in range(K):
        x = a * x + kick[k] if k else x
        out[k] = x
    return out


def drift_loads(
    rng: np.random.Generator, m: Moe, starts: np.ndarray, duration: float
) -> tuple[np.ndarray, list[Surge], dict[str, float]]:
    """(K, Lm, R) mean load of every rank's experts in each regime, relative to a balanced router."""
    K, Lm, R = len(starts), LAYERS_MODELLED, m.ranks
    epr = int(rng.choice([1, 2, 4]))
    E = R * epr
    every = float(starts[1] - starts[0]) if K > 1 else 60.0
    tau = float(rng.uniform(300, 1500))
    a = float(np.exp(-every / tau))
    sd_c, sd_l = float(rng.uniform(0.08, 0.3)), float(rng.uniform(0.04, 0.15))
    logp = (
        rng.normal(0.0, rng.uniform(0.0, 0.1), (Lm, E))[None]  # what the balancing loss has not evened out
        + _ou(rng, K, (E,), a, sd_c)[:, None, :]  # shared by the expert across layers
        + _ou(rng, K, (Lm, E), a, sd_l)
    )
    mids = starts + every / 2
    surges = []
    for _ in range(min(int(rng.poisson(duration / 2400)), 4)):
        e = int(rng.integers(E))
        rise, hold, fall = rng.uniform(120, 600), rng.uniform(0, 600), rng.uniform(120, 900)
        t0 = float(rng.uniform(0, duration - 300))
        amp = float(rng.uniform(0.4, 1.1))
        x = mids - t0
        shape = np.where(
            x < rise,
            np.clip(x / rise, 0, 1),
            np.where(x < rise + hold, 1.0, np.clip(1 - (x - rise - hold) / fall, 0, 1)),
        )
        shape = np.sin(0.5 * np.pi * shape) ** 2
        logp[:, :, e] += amp * shape[:, None] * rng.uniform(0.5, 1.0, Lm)[None, :]
        surges.append(Surge(t0, t0 + rise + hold + fall, e, [e // epr], amp))
    p = np.exp(logp).reshape(K, Lm, R, epr).mean(axis=-1).reshape(K, Lm, m.groups, -1)
    lam = (p / p.mean(axis=-1, keepdims=True)).reshape(K, Lm, R)
    return lam, surges, {"experts_per_rank": epr, "drift_tau_s": tau, "drift_sd": sd_c, "layer_sd": sd_l}


def _checkpoints(rng: np.random.Generator, m: Moe, first_step: float, duration: float) -> list[Pause]:
    """Checkpoints: the job stops, every rank writes its shard (storage traffic on every port)."""
    pauses = []
    period = float(rng.uniform(1200, 3600))
    t = first_step + period * float(rng.uniform(0.3, 1.0))
    while t < duration - 400:
        write = float(rng.uniform(20, 120))
        pauses.append(
            Pause(
                t,
                t + write,
                mix(deep_idle=0.7, idle=0.2, light=0.1),
                grain=2.0,
                name="checkpoint",
                port_bytes_s=np.full(m.ports, rng.uniform(1e9, 4e9) / m.rails_n),
                port_wait_s=np.full(m.ports, rng.uniform(0.02, 0.2)),
            )
        )
        t += write + period
    return pauses


# ---------------------------------------------------------------------------------------------------------
# faults


def fault_inputs(
    m: Moe, fleet: Fleet, kind: str, where: tuple[int, ...], x: float, mode: str, clean_s: float
) -> tuple[Electrical, dict[str, np.ndarray], Fleet | None, str]:
    """The electrical state, the step's fault arguments, the fleet as the fault makes it read (gpu_degraded)
    and a description, for a fault of intensity x in [0, 1]."""
    R = m.ranks
    if kind in ("thermal", "power_cap"):
        rank = where[0] * m.gpn + where[1]
        elec = electrical(fleet, kind, rank, x)
        return elec, {}, None, elec.detail
    if kind == "gpu_degraded":
        fault_fleet, deg, detail = memory_stalls(fleet, where[0] * m.gpn + where[1], x)
        return electrical(fault_fleet), {"deg": deg}, fault_fleet, detail
    elec = electrical(fleet)
    if kind == "slow_host":  # 4L launch gaps a step
        extra = host_gaps(R, m.gpn, where[0], int(m.e0 * 1e9), x, clean_s, 4 * m.L)
        return elec, {"host_extra": extra}, None, "host launches late after every all-to-all sync (CPU contention)"
    txf, rxf = nic_shares(m.ports, where[1], x, mode)
    return elec, {"txf": txf, "rxf": rxf}, None, nic_detail(m.rate_gbps, where[1], x, mode)


def _locate(rng: np.random.Generator, m: Moe, lam_w: np.ndarray, kind: str) -> tuple[int, ...]:
    """A rank hot in the window (its experts' mean load the highest), a cold one, or any."""
    load = lam_w.mean(axis=(0, 1))
    u = rng.random()
    rank = int(np.argmax(load)) if u < 0.35 else int(np.argmin(load)) if u < 0.55 else int(rng.integers(m.ranks))
    node, gpu = divmod(rank, m.gpn)
    if kind == "slow_nic":
        return node, node * m.rails_n + (gpu if m.rails else 0)
    return node, gpu


# ---------------------------------------------------------------------------------------------------------


def generate(seed: int) -> Case:
    rng = rng_for(FAMILY, seed)
    target = design(FAMILY, seed)
    m, fleet, decoys = draw(rng)
    duration = draw_duration(rng)
    R = m.ranks
    sample_s = float(rng.choice(SAMPLES))
    starts = regime_edges(duration, sample_s, float(rng.uniform(60, 120)))
    lam, surges, drift = drift_loads(rng, m, starts, duration)
    if surges:
        decoys.append("expert_surge")
    elec_clean = electrical(fleet)
    if np.any(elec_clean.bits_act[COMPUTE] & 0x4):
        decoys.append("power_capped_healthy_gpus")
    clean = evaluate(m, fleet, elec_clean, lam)
    init = _init(rng, R)
    ckpts = _checkpoints(rng, m, init.end, duration)
    if ckpts:
        decoys.append("checkpoint")
    load = np.clip(lam, LAM_MIN, m.cap).mean(axis=1)  # (K, R)
    clean_plans = plans(m, clean)
    port_node, port_gpu = ports_of(m.nodes, m.gpn, m.rails)
    job = Job(
        family=FAMILY,
        seed=seed,
        rng=rng,
        nodes=m.nodes,
        gpus_per_node=m.gpn,
        sample_s=sample_s,
        duration_s=duration,
        fleet=fleet,
        port_node=port_node,
        port_gpu=port_gpu,
        rate_gbps=m.rate_gbps,
        clean=clean_plans[0],
        elec_clean=elec_clean,
        pauses=[init, *ckpts],
        decoys=decoys,
        params={
            "gpu": fleet.kind.name,
            "layers": m.L,
            "ep_nodes": m.g,
            "rails": m.rails,
            "capacity_factor": m.cap if np.isfinite(m.cap) else None,  # None: dropless
            "step_s": float(np.median(clean.S)),
            "link_gbps": float(m.rate_gbps[0]),
            "regime_starts": starts.tolist(),
            "regime_step_s": clean.S.tolist(),
            "hot_rank": np.argmax(load, axis=1).tolist(),  # the rank with the most expert load, per regime
            "hot_load": load.max(axis=1).tolist(),
            "surges": [(s.start, s.end, s.ranks, s.amp) for s in surges],
            "wait": "spin",
            **drift,
        },
    )
    draw_measurement(job, drift=(0.003, 0.01))
    fault_fleet = None
    faulty: list[StepPlan | None] = [None] * len(starts)
    if target is not None:
        onset, end = draw_window(rng, duration)
        inside = np.nonzero((starts + (starts[1] - starts[0]) > onset) & (starts < end))[0]
        sub = inside[np.unique(np.linspace(0, len(inside) - 1, CALIBRATION_REGIMES).round().astype(int))]
        lam_w, clean_w = lam[sub], clean.S[sub]
        clean_s = float(np.mean(clean_w))

        def slowdown_of(kind: str, where: tuple[int, ...], x: float, mode: str) -> float:
            elec, args, _, _ = fault_inputs(m, fleet, kind, where, x, mode, clean_s)
            return float(np.mean(evaluate(m, fleet, elec, lam_w, **args).S / clean_w) - 1)

        choice = pick_fault(
            rng,
            target,
            {"thermal": 1.0, "power_cap": 1.0, "gpu_degraded": 1.0, "slow_nic": 1.0, "slow_host": 1.0},
            lambda kind: _locate(rng, m, lam_w, kind),
            slowdown_of,
            nic_modes(rng),
        )
        elec_f, args, fault_fleet, detail = fault_inputs(
            m, fleet, choice.kind, choice.where, choice.x, choice.mode, clean_s
        )
        for k, p in zip(inside, plans(m, evaluate(m, fleet, elec_f, lam[inside], **args)), strict=True):
            faulty[k] = p
        job.elec_fault = elec_f
        job.fault = record(rng, choice, m.gpn, elec_f, (onset, end), target, detail)
        node, is_gpu = choice.where[0], job.fault.gpu is not None
        window_load = load[inside].mean(axis=0).reshape(m.nodes, m.gpn)
        if is_gpu or (choice.kind == "slow_nic" and m.rails):
            culprit_load = window_load[node, choice.where[1] % m.gpn]
        else:
            culprit_load = window_load[node].mean()
        job.params["fault_load"] = float(culprit_load)  # the culprit's expert load in the window (1: balanced)
    regimes = [Regime(float(s), p, f) for s, p, f in zip(starts, clean_plans, faulty, strict=True)]
    return render_regimes(job, regimes, fault_fleet, phase_jitter=float(rng.uniform(0.01, 0.04)))
