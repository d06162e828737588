"""pipeline: 1F1B pipeline parallel across nodes, tensor parallel inside each node, data parallel across
pipeline replicas.

Layout. nodes = P stages x D replicas; node (d, s) holds stage s of replica d, its 8 GPUs splitting every
layer (tensor parallel over NVLink, one all-reduce per layer). A step pushes M micro-batches through.

Step. Stage s needs t_s per micro-batch (forward + backward, forward a third of it): the TP group moves
at the pace of its slowest GPU (per-layer syncs), and its healthy GPUs wait for it inside the NVLink
all-reduces (spin). The first stage carries the embedding (0-10% heavier) and the last the LM head and
loss (10-40% heavier): permanently, so the last stage is the pipeline's bottleneck and every other
stage idles a little in each micro-batch, a role, not a fault. In 1F1B a replica's pipeline lasts
(M-1) * max_s(t_s) + sum_s(t_s) plus the activation transfers of the fill and drain; stage s waits
(spinning in its NCCL receive) sum_{j<s} of forwards at the start and of backwards at the end, and
in the steady state max(t) - t_s per micro-batch. Activations go stage to stage over each node's NIC,
overlapped with compute, so a link only sets the pace once moving a micro-batch takes longer than
computing it. After the drain, each stage all-reduces its gradients with the same stage of the other
replicas (a ring over D nodes), unoverlapped, then an optimizer step (light kernels); the slowest
replica makes every other replica wait at that all-reduce.

Faults:
- thermal / power_cap on one GPU: its TP group (node) slows. On the bottleneck stage the whole job slows
  with it; on a lighter stage the slowdown is first absorbed by that stage's bubbles and only the fill
  and drain grow, so the GPU can be far slower than the job is. Its node-mates show spin time.
- slow_host: the node's GPUs idle between micro-batches (launch starvation): idle, not spin.
- slow_nic: activations to and from the node and its share of the stage's DP ring move slower; the fill and
  drain lengthen at once, the steady state only once the link is slower than the compute. xmit_wait
  rises on the ports that send into a link trained at a lower rate, or on a congested port itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuscope.bench.workloads import Case
from gpuscope.bench.workloads._common import design, draw_duration, log_uniform_int, rng_for
from gpuscope.bench.workloads._dp import _init, attach_any_fault
from gpuscope.bench.workloads._engine import Job, StepPlan, draw_measurement, onehot, plan, render, sample_grid
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

FAMILY = "pipeline"


@dataclass
class Pipe:
    P: int
    D: int
    gpn: int
    M: int
    t0: float  # fwd+bwd seconds per micro-batch of a middle stage at the top clock
    w: np.ndarray  # (P,) stage weights
    act_bytes: float  # activation (or its gradient) bytes per micro-batch per stage boundary
    grad_bytes: np.ndarray  # (P,) gradient bytes of a stage (whole node)
    rate_gbps: np.ndarray  # (nodes,)
    eta: float
    hop_s: float
    opt_s: float
    sigma: float
    h0: np.ndarray  # (R,) normal host gap per micro-batch
    wait_base: np.ndarray  # (nodes,)

    @property
    def nodes(self) -> int:
        return self.P * self.D

    def node(self, d: int, s: int) -> int:
        return d * self.P + s


def step(
    pp: Pipe,
    elec: Electrical,
    fleet: Fleet,
    host_extra: np.ndarray | None = None,
    tx: np.ndarray | None = None,
    rx: np.ndarray | None = None,
) -> StepPlan:
    """tx, rx: (nodes,) effective send / receive rates as a share of the link rate (1 when healthy); the
    reported link rate is rx (a link trained lower is slow both ways, a congested egress only sending)."""
    N, gpn, P, D, M = pp.nodes, pp.gpn, pp.P, pp.D, pp.M
    R = N * gpn
    rate = pp.rate_gbps * 1e9 / 8
    tx_r = rate * (np.ones(N) if tx is None else tx)
    rx_r = rate * (np.ones(N) if rx is None else rx)
    link_r = rx_r  # the signalling rate: what the port could send at if it had credits
    stage = np.tile(np.repeat(np.arange(P), gpn), D)
    c = pp.t0 * pp.w[stage] * fleet.het / elec.speed
    h = pp.h0 + (0.0 if host_extra is None else host_extra)
    t_node = np.max((c + h).reshape(N, gpn), axis=1) * (1 + 0.35 * pp.sigma)

    def xfer(a: int, b: int, nbytes: float) -> float:
        return nbytes / (min(tx_r[a], rx_r[b]) * pp.eta)

    out_t = np.zeros(N)
    in_t = np.zeros(N)
    hop_f = np.zeros((D, max(P - 1, 1)))
    hop_b = np.zeros((D, max(P - 1, 1)))
    for d in range(D):
        for s in range(P - 1):
            a, b = pp.node(d, s), pp.node(d, s + 1)
            hop_f[d, s] = xfer(a, b, pp.act_bytes)
            hop_b[d, s] = xfer(b, a, pp.act_bytes)
            out_t[a] += hop_f[d, s]
            in_t[b] += hop_f[d, s]
            out_t[b] += hop_b[d, s]
            in_t[a] += hop_b[d, s]
    pace = np.maximum(t_node, np.maximum(out_t, in_t))
    t_n = t_node.reshape(D, P)
    t_max = pace.reshape(D, P).max(axis=1)
    t_pipe = (M - 1) * t_max + t_n.sum(axis=1) + (hop_f.sum(axis=1) + hop_b.sum(axis=1)) * (P > 1)
    T_pipe = float(t_pipe.max())

    t_dp = np.zeros(P)
    dp_bytes = np.zeros(N)
    if D > 1:
        for s in range(P):
            ring = [pp.node(d, s) for d in range(D)]
            pace_r = min(min(tx_r[a], rx_r[ring[(i + 1) % D]]) for i, a in enumerate(ring))
            b_s = 2 * (D - 1) / D * pp.grad_bytes[s]
            t_dp[s] = b_s / (pace_r * pp.eta) + 2 * (D - 1) * pp.hop_s
            dp_bytes[ring] = b_s
    T_dp = float(t_dp.max())
    S = T_pipe + T_dp + pp.opt_s

    # ranks: fill, middle (1F1B), drain, replica wait, DP transfer, DP wait, optimizer
    fill_n = np.zeros(N)
    drain_n = np.zeros(N)
    mid_n = np.zeros(N)
    for d in range(D):
        for s in range(P):
            n = pp.node(d, s)
            fill_n[n] = np.sum(t_n[d, :s] / 3 + hop_f[d, :s]) if s else 0.0
            drain_n[n] = np.sum(2 * t_n[d, :s] / 3 + hop_b[d, :s]) if s else 0.0
            mid_n[n] = t_pipe[d] - fill_n[n] - drain_n[n]
    rep = np.repeat(np.arange(N) // P, gpn)
    node_r = np.repeat(np.arange(N), gpn)
    mid = mid_n[node_r]
    comp = np.zeros((R, N_ACT))
    comp[:, COMPUTE] = M * c / mid
    comp[:, IDLE] = M * h / mid
    comp[:, SPIN] = 1.0 - comp[:, COMPUTE] - comp[:, IDLE]
    if np.any(comp[:, SPIN] < -1e-9):
        raise AssertionError("a stage computes longer than its pipeline")
    comp[:, SPIN] = np.maximum(comp[:, SPIN], 0.0)
    stage_r = np.repeat(np.arange(N) % P, gpn)
    segments = [
        (fill_n[node_r], onehot(SPIN), 0.0),
        (mid, comp, float(t_max.max())),
        (drain_n[node_r], onehot(SPIN), 0.0),
        (T_pipe - t_pipe[rep], onehot(SPIN), 0.0),
        (t_dp[stage_r], onehot(XFER), 0.0),
        (T_dp - t_dp[stage_r], onehot(SPIN), 0.0),
        (np.full(R, pp.opt_s), onehot(LIGHT), 0.0),
    ]

    # ports: activations during the 1F1B middle, gradients in the DP ring
    def waits(sends: list[tuple[int, int, float]]) -> np.ndarray:
        w = np.zeros(N)
        for a, b, nbytes in sends:
            w[a] += nbytes * max(0.0, 1 / min(tx_r[a], rx_r[b]) - 1 / link_r[a]) + nbytes * pp.wait_base[a] / link_r[a]
        return w

    p2p_sends, dp_sends = [], []
    for d in range(D):
        for s in range(P - 1):
            a, b = pp.node(d, s), pp.node(d, s + 1)
            p2p_sends += [(a, b, M * pp.act_bytes), (b, a, M * pp.act_bytes)]
    if D > 1:
        for s in range(P):
            ring = [pp.node(d, s) for d in range(D)]
            dp_sends += [(a, ring[(i + 1) % D], dp_bytes[a]) for i, a in enumerate(ring)]
    p2p_b = np.zeros(N)
    for a, _, nb in p2p_sends:
        p2p_b[a] += nb
    stage_n = np.arange(N) % P
    ports = [
        (fill_n, fill_n + mid_n, p2p_b, waits(p2p_sends)),
        (np.full(N, T_pipe), T_pipe + t_dp[stage_n], dp_bytes, waits(dp_sends)),
    ]
    return plan(S, T_dp + pp.opt_s, segments, ports, R)


def draw(rng: np.random.Generator) -> tuple[Pipe, Fleet]:
    P = int(rng.choice([2, 4, 8], p=[0.3, 0.4, 0.3]))
    D = log_uniform_int(rng, 1, 64 // P)
    gpn = 8
    fleet = draw_fleet(rng, P * D, gpn)
    M = log_uniform_int(rng, max(P, 4), 64)
    t0 = float(np.exp(rng.uniform(np.log(0.03), np.log(0.4))))
    w = 1 + rng.normal(0, 0.01, P)
    w[0] = 1 + rng.uniform(0, 0.1)
    w[-1] = 1 + rng.uniform(0.1, 0.4)
    link = 400.0 if rng.random() < 0.7 else 200.0
    eta = float(rng.uniform(0.7, 0.9))
    act = rng.uniform(0.02, 0.15) * t0 * link * 1e9 / 8 * eta
    t_pipe = (M - 1) * t0 * w.max() + t0 * w.sum()
    dp_share = rng.uniform(0.03, 0.3)  # the DP all-reduce as a share of the pipeline time
    grad = dp_share * t_pipe * link * 1e9 / 8 * eta / max(2 * (D - 1) / D, 1e-9) * w / w.max()
    pp = Pipe(
        P=P,
        D=D,
        gpn=gpn,
        M=M,
        t0=t0,
        w=w,
        act_bytes=float(act),
        grad_bytes=grad if D > 1 else np.zeros(P),
        rate_gbps=np.full(P * D, link),
        eta=eta,
        hop_s=float(rng.uniform(5e-6, 2e-5)),
        opt_s=float(rng.uniform(0.01, 0.05) * t_pipe),
        sigma=float(rng.uniform(0.01, 0.05)),
        h0=t0 * rng.uniform(0.0, 0.02) * rng.uniform(0.5, 1.5, P * D * gpn),
        wait_base=rng.uniform(0.002, 0.03, P * D),
    )
    return pp, fleet


def fault_state(
    pp: Pipe, fleet: Fleet, kind: str, where: tuple[int, ...], x: float, mode: str
) -> tuple[StepPlan, Electrical]:
    model = StepModel(fleet, pp.nodes, lambda elec: step(pp, elec, fleet).S, int(pp.t0 * 1e6), pp.M)
    f = rank_fault(kind, where, x, mode, model)
    return step(pp, f.elec, fleet, f.host_extra, f.tx, f.rx), f.elec


def generate(seed: int) -> Case:
    rng = rng_for(FAMILY, seed)
    target = design(FAMILY, seed)
    pp, fleet = draw(rng)
    duration = draw_duration(rng)
    R = pp.nodes * pp.gpn
    sample_s = sample_grid(rng, R, duration)
    elec_clean = electrical(fleet)
    clean = step(pp, elec_clean, fleet)
    decoys = ["heavier_last_stage", "pipeline_bubbles"]
    if np.any(elec_clean.bits_act[COMPUTE] & 0x4):
        decoys.append("power_capped_healthy_gpus")
    port_node = np.arange(pp.nodes)
    job = Job(
        family=FAMILY,
        seed=seed,
        rng=rng,
        nodes=pp.nodes,
        gpus_per_node=pp.gpn,
        sample_s=sample_s,
        duration_s=duration,
        fleet=fleet,
        port_node=port_node,
        port_gpu=np.full(pp.nodes, -1),
        rate_gbps=pp.rate_gbps,
        clean=clean,
        elec_clean=elec_clean,
        pauses=[_init(rng, R)],
        decoys=decoys,
        params={
            "gpu": fleet.kind.name,
            "stages": pp.P,
            "replicas": pp.D,
            "microbatches": pp.M,
            "stage_weights": [round(float(v), 3) for v in pp.w],
            "step_s": clean.S,
            "link_gbps": float(pp.rate_gbps[0]),
            "wait": "spin",
        },
    )
    draw_measurement(job, power_window_s=1.0)
    if target is not None:
        attach_any_fault(job, pp, fleet, target, duration, clean.S, fault_state)
    return render(job)
