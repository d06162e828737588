"""moe_fsdp: a mixture-of-experts transformer trained with FSDP (ZeRO-3) over every rank and expert
parallelism over groups of nodes.

Layout. N nodes x 8 GPUs, one NIC per node. Every rank holds a 1/R shard of the dense weights and of its
experts' weights (ZeRO-3); the experts of each MoE layer are spread over an expert-parallel (EP) group of
g nodes (8g ranks, a few experts each), and every token goes to its top-k experts wherever they live.

Step. Per layer, forward:
  1. dense part (attention, router, shared expert): d per rank, with a small per-step jitter;
  2. dispatch all-to-all: every rank sends its tokens to the ranks holding their experts;
  3. expert part: rank r runs the tokens its experts received, e * lambda_r, where lambda_r, the rank's
     load relative to a perfectly balanced router, is drawn afresh for every layer of every step. Tokens
     are conserved within the EP group; the load-balancing loss keeps the spread nu small (3-15%); a
     capacity factor, where the job uses one, drops the tokens above it (dropless jobs have none);
  4. combine all-to-all: the expert outputs go back to their tokens' ranks.
The all-to-alls are barriers: no rank has all its input before the slowest has sent, so each phase lasts
as long as its slowest rank, and ranks done early spin in the NCCL kernel (util 100%, a few SMs, no
tensor work). Meanwhile FSDP all-gathers the next layer's parameter shards (prefetch). It shares the NIC
with the all-to-alls, so it hides only under the compute phases; the excess is exposed, every rank
waiting in the all-gather kernel. Backward: the same in reverse with kappa x the compute (2, or 3 with
activation recomputation), the same routing (the same lambdas), two all-to-alls of gradients, and under
the compute both the re-gather of the previous layer's parameters and the reduce-scatter of the next
one's gradients. The step opens with the first layer's all-gather and closes with the last
reduce-scatter (both exposed) and the optimizer on the local shard (light kernels).
Barriers every layer make the step a sum over layers of expected maxima over ranks: the imbalance does
not average out over a step. The expectations are over a fixed set of draws per seed. EP groups are
coupled by the FSDP collectives, which span every rank and run at most one layer ahead; the model takes
the coupling as tight (a layer ends for everyone when its slowest rank is done), exact when the gathers
set the pace and an upper bound otherwise.

Network. A node's all-to-all time is max(sent / egress rate, received / ingress rate): in the dispatch
it sends its own tokens (balanced) and receives in proportion to its experts' load, the other way round
in the combine; an all-to-all lasts as long as its busiest node. All-gathers and reduce-scatters are
rings over all nodes at the pace of their slowest link. Every port carries the all-to-alls and the FSDP
traffic; the all-to-alls' incast gives every port a baseline xmit_wait. A link trained at a lower rate
signals at that rate without waiting, but every node of its EP group waits for credits on the bytes it
sends there, as does its ring predecessor; a congested port waits on everything it sends.

Faults:
- thermal / power_cap on one GPU: the GPU is the last to finish every dense phase at once, but an expert
  phase only once its slowdown exceeds the usual imbalance (that slack absorbs part of it); all other
  ranks spin longer; the culprit reads a lower clock and more tensor activity;
- slow_host: MoE dispatch needs the split sizes on the host (a device-to-host sync every all-to-all), so
  a node whose CPUs are slow (contention, throttling) launches late after every sync: its GPUs idle
  (util drops), everyone else spins;
- slow_nic: every all-to-all and every ring waits for that link, all ranks spend longer in transfers;
  rate_gbps drops on the culprit (downtrained) and xmit_wait rises on the ports sending to it, or on the
  culprit itself (congested).
Decoys (not faults, in clean_step_s where they cost time): the per-step load imbalance (every rank spins
some of every layer), a popular expert (one rank persistently computes more and makes everyone wait), the
router's imbalance drifting over the job, a hot expert for some minutes (a shift in the data: one or two
ranks compute more and their NICs send more, everyone else waits), sharded or asynchronous checkpoints,
healthy GPUs at their power limit, a slow die, a hot slot, a noisy port, an exporter outage.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from gpuscope.bench.workloads import Case
from gpuscope.bench.workloads._common import design, draw_duration, fleet_decoys, log_uniform_int, noisy_port, rng_for
from gpuscope.bench.workloads._dp import _init, attach_any_fault
from gpuscope.bench.workloads._engine import (
    Job,
    Pause,
    StepPlan,
    draw_measurement,
    mix,
    onehot,
    plan,
    render,
    sample_grid,
)
from gpuscope.bench.workloads._faults import StepModel, rank_fault
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
from gpuscope.bench.workloads._pauses import async_write, shard_write, snapshot

FAMILY = "moe_fsdp"
N_MC = 96  # draws of the per-layer loads and jitter the expectations are taken over
LAM_MIN = 0.2  # no rank's experts get less than this share of a balanced load


@dataclass
class Moe:
    nodes: int
    gpn: int
    g: int  # nodes per expert-parallel group
    L: int  # MoE layers
    kappa: float  # backward compute / forward compute
    d0: float  # dense seconds per layer (forward) at the top clock
    e0: float  # expert seconds per layer (forward) at the top clock and a balanced load
    nu: float  # spread of a rank's per-layer load around its mean
    cap: float  # capacity factor: the most load a rank runs (inf: dropless)
    bias: np.ndarray  # (R,) persistent mean load of each rank, mean 1 in each EP group
    sigma: float  # per-step jitter of the dense compute
    h0: np.ndarray  # (R,) host launch gap per compute phase
    a2a_bytes: float  # inter-node bytes a node sends in one all-to-all at balanced load
    ag_bytes: float  # bytes a node sends in one layer's all-gather
    rs_bytes: float  # bytes a node sends in one layer's reduce-scatter
    a2a_lat: float
    hop_s: float
    eta: float
    opt_s: float
    rate_gbps: np.ndarray  # (P,)
    w_a2a: np.ndarray  # (P,) baseline credit wait per all-to-all transmit second (incast)
    w_ring: np.ndarray  # (P,) baseline credit wait per ring transmit second
    z: np.ndarray  # (N_MC, R) load draws, centred in each EP group (tokens are conserved)
    zd: np.ndarray  # (N_MC, R) dense jitter draws, centred per rank

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpn

    @property
    def group(self) -> np.ndarray:
        """EP group of each node."""
        return np.arange(self.nodes) // self.g

    def loads(self, nu: float | None = None, bias: np.ndarray | None = None) -> np.ndarray:
        """(N_MC, R) the load each rank's experts get in a layer, relative to a balanced router."""
        b = self.bias if bias is None else bias
        v = self.nu if nu is None else nu
        return np.clip(b[None, :] + v * self.z, LAM_MIN, self.cap)


@dataclass
class State:
    """The step in one state of the job, with what it sums to per step."""

    plan: StepPlan
    secs: np.ndarray  # (R, A) seconds per activity
    port_bytes: np.ndarray  # (P,)
    port_wait: np.ndarray  # (P,) seconds of credit wait


def state(
    m: Moe,
    elec: Electrical,
    fleet: Fleet,
    host_extra: np.ndarray | None = None,
    tx: np.ndarray | None = None,
    rx: np.ndarray | None = None,
    nu: float | None = None,
    bias: np.ndarray | None = None,
) -> State:
    """tx, rx: (P,) effective send / receive rates as shares of the link rate (1 when healthy); the
    reported link rate and the signalling rate are rx's (a link trained lower is slow both ways, a
    congested egress only sending)."""
    N, gpn, L = m.nodes, m.gpn, m.L
    R = N * gpn
    slow = fleet.het / elec.speed
    d, e = m.d0 * slow, m.e0 * slow
    h = m.h0 if host_extra is None else m.h0 + host_extra
    lam = m.loads(nu, bias)
    load = lam.mean(axis=0)
    jit = 1.0 + m.sigma * m.zd

    def walls(k: float) -> tuple[float, float]:
        dense = float(np.mean(np.max(h + k * d * jit, axis=1)))
        expert = float(np.mean(np.max(h + k * e * lam, axis=1)))
        return dense, expert

    d_f, x_f = walls(1.0)
    d_b, x_b = walls(m.kappa)

    rate = m.rate_gbps * 1e9 / 8
    txr = rate * (1.0 if tx is None else tx)
    rxr = rate * (1.0 if rx is None else rx)
    link = rxr
    node_load = lam.reshape(N_MC, N, gpn).mean(axis=2)  # (N_MC, N)
    B = m.a2a_bytes
    dispatch = np.max(np.maximum(B / txr, B * node_load / rxr), axis=1)
    combine = np.max(np.maximum(B * node_load / txr, B / rxr), axis=1)
    A = float(np.mean(dispatch + combine)) / m.eta + 2 * m.a2a_lat  # both all-to-alls of a layer, one pass

    nxt = (np.arange(N) + 1) % N
    ring = float(np.min(np.minimum(txr, rxr[nxt])))
    t_ag = m.ag_bytes / (ring * m.eta) + (N - 1) * m.hop_s
    t_rs = m.rs_bytes / (ring * m.eta) + (N - 1) * m.hop_s
    exp_f = max(0.0, t_ag - (d_f + x_f))
    exp_b = max(0.0, t_ag + t_rs - (d_b + x_b))
    pre = (L - 1) / L  # the first layer's gather and the last one's reduce-scatter are not overlapped
    layer_f = d_f + x_f + A + pre * exp_f
    layer_b = d_b + x_b + A + pre * exp_b
    F, Bw = L * layer_f, L * layer_b
    S = t_ag + F + Bw + t_rs + m.opt_s
    fixed = t_ag + t_rs + 2 * L * A + (L - 1) * (exp_f + exp_b)

    def comp(k: float, exposed: float, total: float) -> np.ndarray:
        c = np.zeros((R, N_ACT))
        c[:, COMPUTE] = L * k * (d + e * load) / total
        c[:, IDLE] = L * 2 * h / total
        c[:, XFER] = (L * A + (L - 1) * exposed) / total
        c[:, SPIN] = np.maximum(1.0 - c.sum(axis=1), 0.0)
        return c / c.sum(axis=1, keepdims=True)

    comp_f, comp_b = comp(1.0, exp_f, F), comp(m.kappa, exp_b, Bw)
    segments = [
        (np.full(R, t_ag), onehot(XFER), 0.0),
        (np.full(R, F), comp_f, layer_f),
        (np.full(R, Bw), comp_b, layer_b),
        (np.full(R, t_rs), onehot(XFER), 0.0),
        (np.full(R, m.opt_s), onehot(LIGHT), 0.0),
    ]
    secs = (t_ag + t_rs) * onehot(XFER)[None, :] + F * comp_f + Bw * comp_b + m.opt_s * onehot(LIGHT)[None, :]

    # ports: bytes node j sends node n in one layer's dispatch + combine (its tokens to n's experts,
    # its experts' outputs to n's tokens), and the credit waits they meet
    eload = node_load.mean(axis=0)
    grp = m.group
    peers = (grp[:, None] == grp[None, :]) & ~np.eye(N, dtype=bool)
    pair = B * (eload[None, :] + eload[:, None]) / (m.g - 1) * peers
    a2a_sent = pair.sum(axis=1)
    slow_pair = np.maximum(1.0 / np.minimum(txr[:, None], rxr[None, :]) - 1.0 / link[:, None], 0.0)
    a2a_wait = np.sum(pair * (slow_pair + m.w_a2a[:, None] / link[:, None]), axis=1)
    ring_wait = np.maximum(1.0 / np.minimum(txr, rxr[nxt]) - 1.0 / link, 0.0) + m.w_ring / link  # per byte
    P = N
    ag, rs = np.full(P, m.ag_bytes), np.full(P, m.rs_bytes)
    t0, t1, t2 = t_ag, t_ag + F, t_ag + F + Bw
    ports = [
        (np.zeros(P), np.full(P, t0), ag, ag * ring_wait),
        (np.full(P, t0), np.full(P, t1), L * a2a_sent + (L - 1) * ag, L * a2a_wait + (L - 1) * ag * ring_wait),
        (
            np.full(P, t1),
            np.full(P, t2),
            L * a2a_sent + (L - 1) * (ag + rs),
            L * a2a_wait + (L - 1) * (ag + rs) * ring_wait,
        ),
        (np.full(P, t2), np.full(P, t2 + t_rs), rs, rs * ring_wait),
    ]
    p = plan(S, fixed, segments, ports, R)
    return State(p, secs, p.port_bytes.sum(axis=0), p.port_wait.sum(axis=0))


# ---------------------------------------------------------------------------------------------------------
# drawing a job


def draw(rng: np.random.Generator) -> tuple[Moe, Fleet, list[str]]:
    nodes = log_uniform_int(rng, 2, 32)
    gpn = 8
    fleet = draw_fleet(rng, nodes, gpn)
    R = nodes * gpn
    decoys = ["moe_load_imbalance"]
    decoys += fleet_decoys(rng, fleet)
    g = int(rng.choice([k for k in range(2, 9) if nodes % k == 0] or [nodes]))
    L = log_uniform_int(rng, 12, 48)
    kappa = 3.0 if rng.random() < 0.4 else 2.0
    c_step = float(np.exp(rng.uniform(np.log(1.5), np.log(12.0))))  # compute seconds per step at fmax
    f0 = c_step / (L * (1 + kappa))
    phi = float(rng.uniform(0.3, 0.7))  # the experts' share of a layer's compute
    nu = float(rng.uniform(0.03, 0.15))
    cap = np.inf if rng.random() < 0.5 else float(rng.uniform(1.1, 1.5))
    bias = np.exp(rng.normal(0.0, rng.uniform(0.0, 0.03), R))
    if rng.random() < 0.4:  # an expert the router favours whatever the loss does
        bias[int(rng.integers(R))] *= rng.uniform(1.05, 1.15)
        decoys.append("popular_expert")
    bias = _per_group_mean_one(bias, nodes // g)
    link = 400.0 if rng.random() < 0.7 else 200.0
    rate = link * 1e9 / 8
    eta = float(rng.uniform(0.7, 0.9))
    hop = float(rng.uniform(5e-6, 2e-5))
    rho_a2a = rng.uniform(0.15, 0.6)  # one balanced all-to-all / the layer's forward expert compute
    rho_ag = rng.uniform(0.2, 1.3)  # one layer's all-gather / the layer's forward compute
    ag_time = max(rho_ag * f0 - (nodes - 1) * hop, 0.2 * rho_ag * f0)
    ag_bytes = ag_time * rate * eta
    w_a2a = rng.uniform(0.02, 0.1, nodes)
    w_ring = rng.uniform(0.002, 0.03, nodes)
    decoys += noisy_port(rng, w_ring)
    z = rng.standard_normal((N_MC, nodes // g, g * gpn))
    z = (z - z.mean(axis=2, keepdims=True)).reshape(N_MC, R)
    zd = rng.standard_normal((N_MC, R))
    m = Moe(
        nodes=nodes,
        gpn=gpn,
        g=g,
        L=L,
        kappa=kappa,
        d0=(1 - phi) * f0,
        e0=phi * f0,
        nu=nu,
        cap=cap,
        bias=bias,
        sigma=float(rng.uniform(0.01, 0.04)),
        h0=0.5 * f0 * rng.uniform(0.0, 0.02) * rng.uniform(0.5, 1.5, R),
        a2a_bytes=float(rho_a2a * phi * f0 * rate * eta),
        ag_bytes=float(ag_bytes),
        rs_bytes=float(ag_bytes * (2.0 if rng.random() < 0.3 else 1.0)),  # fp32 gradient reduction
        a2a_lat=float(rng.uniform(2e-5, 8e-5)),
        hop_s=hop,
        eta=eta,
        opt_s=float(rng.uniform(0.01, 0.04) * c_step),
        rate_gbps=np.full(nodes, link),
        w_a2a=w_a2a,
        w_ring=w_ring,
        z=z,
        zd=zd - zd.mean(axis=0, keepdims=True),
    )
    return m, fleet, decoys


def _per_group_mean_one(b: np.ndarray, groups: int) -> np.ndarray:
    g = b.reshape(groups, -1)
    return (g / g.mean(axis=1, keepdims=True)).reshape(-1)


def fault_state(
    m: Moe, fleet: Fleet, kind: str, where: tuple[int, ...], x: float, mode: str
) -> tuple[StepPlan, Electrical]:
    st, elec = _fault_state(m, fleet, kind, where, x, mode)
    return st.plan, elec


def _fault_state(
    m: Moe, fleet: Fleet, kind: str, where: tuple[int, ...], x: float, mode: str
) -> tuple[State, Electrical]:
    # 4L launch gaps a step: the host syncs on the split sizes before each of a layer's four all-to-alls
    model = StepModel(fleet, m.nodes, lambda elec: state(m, elec, fleet).plan.S, int(m.e0 * 1e9), 4 * m.L)
    f = rank_fault(kind, where, x, mode, model)
    return state(m, f.elec, fleet, f.host_extra, f.tx, f.rx), f.elec


# ---------------------------------------------------------------------------------------------------------
# what the job does besides steady steps


def _checkpoints(rng: np.random.Generator, m: Moe, first_step: float, duration: float) -> tuple[list[Pause], str]:
    """Sharded checkpoints (every rank writes its shard; the job stops) or asynchronous ones (a short
    snapshot, then background writers steal CPU and PCIe from every rank for minutes)."""
    mode = "sharded" if rng.random() < 0.6 else "async"
    period = float(rng.uniform(900, 3600))
    P = m.nodes
    pauses: list[Pause] = []
    t = first_step + period * float(rng.uniform(0.3, 1.0))
    while t < duration - 400:
        snap = float(rng.uniform(2, 10))
        pauses.append(snapshot(t, t + snap))
        if mode == "sharded":
            write = float(rng.uniform(15, 90))
            sent, waits = np.full(P, rng.uniform(1e9, 4e9)), np.full(P, rng.uniform(0.05, 0.3))
            pauses.append(shard_write(t + snap, t + snap + write, sent, waits, mix(deep_idle=0.85, idle=0.15)))
        else:
            write = float(rng.uniform(60, 300))
            share = float(rng.uniform(0.03, 0.12))
            sent, waits = np.full(P, rng.uniform(3e8, 1.5e9)), np.full(P, rng.uniform(0.02, 0.15))
            pauses.append(async_write(t + snap, t + snap + write, share, sent, waits))
        t += snap + write + period
    return pauses, f"checkpoint_{mode}"


@dataclass
class HotExpert:
    start: float
    end: float
    ranks: list[int]
    factor: float


def _router(
    rng: np.random.Generator,
    m: Moe,
    fleet: Fleet,
    base: State,
    first_step: float,
    duration: float,
    blocked: list[Pause],
) -> tuple[list[Pause], list[str], list[HotExpert]]:
    """The router's state over the job as stalls on top of the base step: the load spread drifting (the
    data mix changes, the balancing loss catches up) and hot experts for some minutes. Each stretch's
    extra time per step, and what every rank and port does in it, comes from the step model at that
    state; the job is fault-free in all of it, so it is in the clean step time."""
    decoys: list[str] = []
    amp = float(rng.uniform(0.3, 1.0)) if rng.random() < 0.7 else 0.0
    period, phase = float(rng.uniform(1800, 7200)), float(rng.uniform(0, 2 * np.pi))
    hot: list[HotExpert] = []
    if rng.random() < 0.6:
        for _ in range(int(rng.integers(1, 4))):
            start = float(rng.uniform(first_step, duration - 700))
            ranks = sorted(int(r) for r in rng.choice(m.ranks, size=int(rng.integers(1, 3)), replace=False))
            hot.append(HotExpert(start, start + float(rng.uniform(120, 600)), ranks, float(rng.uniform(1.3, 2.0))))
        decoys.append("hot_expert")
    if amp > 0:
        decoys.append("router_imbalance_drift")
    if amp == 0 and not hot:
        return [], decoys, hot
    chunk = float(rng.uniform(240, 480))
    edges = {*np.arange(first_step, duration, chunk).tolist(), duration}
    edges |= {t for w in hot for t in (w.start, w.end) if first_step < t < duration}
    edges |= {t for p in blocked for t in (p.start, p.end) if first_step < t < duration}
    cuts = sorted(edges)
    spans: list[tuple[float, float, tuple[int, tuple[int, ...]]]] = []
    for a, b in itertools.pairwise(cuts):
        mid = 0.5 * (a + b)
        if b - a < 1e-6 or any(p.start <= mid < p.end for p in blocked):
            continue
        key = (int((mid - first_step) // chunk), tuple(i for i, w in enumerate(hot) if w.start <= mid < w.end))
        if spans and spans[-1][1] == a and spans[-1][2] == key:
            spans[-1] = (spans[-1][0], b, key)
        else:
            spans.append((a, b, key))
    elec = electrical(fleet)
    cache: dict[tuple[int, tuple[int, ...]], Pause | None] = {}
    pauses = []
    for a, b, key in spans:
        if key not in cache:
            k, active = key
            t_mid = first_step + (k + 0.5) * chunk
            nu = m.nu * (1.0 + amp * (0.5 + 0.5 * np.sin(2 * np.pi * t_mid / period + phase)))
            bias = m.bias.copy()
            for i in active:
                bias[hot[i].ranks] *= hot[i].factor
            st = state(m, elec, fleet, nu=nu, bias=_per_group_mean_one(bias, m.nodes // m.g))
            cache[key] = _stall(base, st, "hot expert" if active else "router imbalance")
        p = cache[key]
        if p is not None:
            pauses.append(Pause(a, b, p.comp, p.grain, p.name, True, p.share, p.port_bytes_s, p.port_wait_s))
    return pauses, decoys, hot


def _stall(base: State, st: State, name: str) -> Pause | None:
    """The extra of state `st` over the base step, as a stall: its share of the step and what the ranks
    and ports do in it."""
    S0, S = base.plan.S, st.plan.S
    delta = S - S0
    if delta <= 1e-6 * S0:
        return None
    extra = np.clip(st.secs - base.secs, 0.0, None)
    total = extra.sum(axis=1, keepdims=True)
    comp = np.where(total > 0, extra / np.where(total > 0, total, 1.0), onehot(SPIN)[None, :])
    return Pause(
        0.0,
        0.0,
        comp,
        grain=0.0,
        name=name,
        stall=True,
        share=float(delta / S),
        port_bytes_s=(st.port_bytes - base.port_bytes) / S,
        port_wait_s=(st.port_wait - base.port_wait) / S,
    )


# ---------------------------------------------------------------------------------------------------------


def generate(seed: int) -> Case:
    rng = rng_for(FAMILY, seed)
    target = design(FAMILY, seed)
    m, fleet, decoys = draw(rng)
    duration = draw_duration(rng)
    R = m.ranks
    sample_s = sample_grid(rng, R, duration)
    elec_clean = electrical(fleet)
    base = state(m, elec_clean, fleet)
    if np.any(elec_clean.bits_act[COMPUTE] & 0x4):
        decoys.append("power_capped_healthy_gpus")
    init = _init(rng, R)
    ckpts, ckpt_kind = _checkpoints(rng, m, init.end, duration)
    if ckpts:
        decoys.append(ckpt_kind)
    router, router_decoys, hot = _router(rng, m, fleet, base, init.end, duration, [init, *ckpts])
    decoys += router_decoys
    s_balanced = state(m, elec_clean, fleet, nu=0.0, bias=np.ones(R)).plan.S
    job = Job(
        family=FAMILY,
        seed=seed,
        rng=rng,
        nodes=m.nodes,
        gpus_per_node=m.gpn,
        sample_s=sample_s,
        duration_s=duration,
        fleet=fleet,
        port_node=np.arange(m.nodes),
        port_gpu=np.full(m.nodes, -1),
        rate_gbps=m.rate_gbps,
        clean=base.plan,
        elec_clean=elec_clean,
        pauses=[init, *ckpts, *router],
        decoys=decoys,
        params={
            "gpu": fleet.kind.name,
            "layers": m.L,
            "ep_nodes": m.g,
            "load_cv": m.nu,
            "capacity_factor": m.cap if np.isfinite(m.cap) else None,  # None: dropless
            "step_s": base.plan.S,
            "imbalance_cost": base.plan.S / s_balanced - 1,
            "comm_exposed_s": base.plan.fixed,
            "link_gbps": float(m.rate_gbps[0]),
            "a2a_bytes": m.a2a_bytes,
            "hot_experts": [(w.start, w.end, w.ranks, w.factor) for w in hot],
            "wait": "spin",
        },
    )
    draw_measurement(job)
    if target is not None:
        attach_any_fault(job, m, fleet, target, duration, base.plan.S, fault_state)
    return render(job)
