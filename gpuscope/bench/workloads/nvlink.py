"""nvlink: tensor parallel inside each node over NVLink, data parallel across nodes over InfiniBand.

Layout. N nodes x 8 GPUs; the 8 GPUs of a node split every layer (Megatron-style tensor parallel) and
all-reduce its activations over NVLink through the NVSwitches, forward and backward; each node is a
data-parallel replica, and the replicas all-reduce their gradients over one NIC per node per step.

Step. A micro-step runs L layers; in each, every GPU computes its shard (c_r, jittered per layer by a
percent or so), then the TP all-reduce, which no GPU can leave before the slowest has contributed: a
layer lasts E[max over the 8 GPUs of their compute] + the NVLink transfer, and the GPUs done early
spin in the NCCL kernel. The per-layer barriers make a node move at the pace of its slowest GPU (the
imbalance does not average out over the layers), and at the pace of its slowest NVLink: NCCL stripes the
traffic evenly over a GPU's links (18 on H100, 12 on A100) and a collective ends when its slowest
stripe does, so one bad link sets the pace of the whole GPU. k micro-steps, then the DP all-reduce
over InfiniBand (a ring over the nodes, partly hidden under the last backward); a node waits there,
spinning, for the slowest node (per-micro-step jitter of the data, E[max] over the nodes). The waits
and transfers are NCCL kernels: util 100%, few SMs.

NVLink counters (per GPU, cumulative, as NVML reports them): tx bytes count the payload each GPU sends
(k L TP all-reduces per step, the same on every GPU: retransmitted flits are not counted), so every
GPU's NVLink bytes/s follow the job's pace; replay errors count the GPU's retransmissions (the far end
saw a bad CRC), CRC errors the bad flits it received, recovery errors the link's retrainings.

Faults (gpu: the local index on `node`):
- nvlink: one of a GPU's links degrades; its stripe, and so all the GPU's collectives, slow to the share
  of bandwidth the link keeps. Three ways: it retrained at fewer lanes (H100 links have 2, A100 links 4:
  a discrete share; recovery events at the retraining, then replays at a modest rate); it stays up but
  corrupts flits (each replay costs a round trip of the replay buffer, so replays climb by the hundred
  thousand per second of traffic, with a recovery every few minutes); or it flaps (retraining over and
  over, tens of milliseconds down each time: recovery errors climb, with the replays of what was in
  flight). CRC errors (received) follow the replays. Half the time a few CRC errors show up in the half
  hour before. The node's TP all-reduces slow, all 8 GPUs of the node spend longer in the transfer (all
  alike), the other nodes wait at the DP all-reduce, the job slows; only the culprit's error counters
  climb.
- thermal / power_cap: one GPU computes slower (lower clock; it reads more tensor activity), its 7 node
  mates spin every layer, every other node waits at the DP all-reduce.
- gpu_degraded: one GPU slower at normal clocks (see _held_out): the same waits, no throttle reason.
- slow_host: the node's GPUs idle before each micro-step (launch and input starvation); everyone else spins.
Decoys: rare CRC errors on healthy GPUs (a burst now and then, a slow drip on one GPU), now and then one
recovery with a few replays and no slowdown, counts left over from before the job, checkpoints, healthy
GPUs at their power limit, an exporter outage.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuscope.bench.workloads import PORT_KEYS, Case
from gpuscope.bench.workloads._common import design, draw_duration, log_uniform_int, pick_fault, rng_for
from gpuscope.bench.workloads._dp import N_MC, _centred, _init, attach_fault
from gpuscope.bench.workloads._engine import Job, Pause, StepPlan, draw_measurement, onehot, plan, render
from gpuscope.bench.workloads._faults import host_gaps
from gpuscope.bench.workloads._gpu import (
    COMPUTE,
    IDLE,
    N_ACT,
    SPIN,
    XFER,
    Electrical,
    Fleet,
    draw_fleet,
    electrical,
)
from gpuscope.bench.workloads._held_out import (
    degraded_electrical,
    degraded_fleet,
    scrape_interval,
    stall_compute,
)
from gpuscope.bench.workloads._pauses import shard_write, snapshot

FAMILY = "nvlink"
NVLINK_BPS = {"H100-SXM": 450e9, "A100-SXM": 300e9}  # per GPU, one way
LANES = {"H100-SXM": 2, "A100-SXM": 4}  # per NVLink (18 links on an H100, 12 on an A100), each way


@dataclass
class TP:
    nodes: int
    gpn: int
    k: int  # micro-steps per optimizer step
    layers: int
    c_layer: float  # compute seconds per layer per micro-step at the top clock
    tp_s: float  # NVLink all-reduce seconds per layer per micro-step, healthy links
    tp_bytes: float  # NVLink bytes a GPU sends per layer per micro-step
    nv_bps: float  # what a GPU's NVLinks carry when healthy (bytes/s, after protocol efficiency)
    sigma_layer: float  # per-layer compute jitter of a GPU
    sigma_mb: float  # per-micro-step jitter of a node (its data)
    h0: np.ndarray  # (R,) host gap per micro-step
    grad_bytes: float  # gradient bytes of a node's 8 shards
    rate_gbps: np.ndarray  # (N,)
    eta: float
    hop_s: float
    beta: float
    lam: float
    wait_base: np.ndarray  # (N,)
    z_gpu: np.ndarray  # (N_MC, gpn)
    z_node: np.ndarray  # (N_MC, N)

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpn

    @property
    def node_of_rank(self) -> np.ndarray:
        return np.repeat(np.arange(self.nodes), self.gpn)


def step(
    tp: TP,
    elec: Electrical,
    fleet: Fleet,
    host_extra: np.ndarray | None = None,
    link: np.ndarray | None = None,
) -> StepPlan:
    """link: (N,) share of the NVLink bandwidth the node's slowest GPU keeps (1 when healthy).
    Ports: rows 0..N-1 the nodes' NICs, rows N.. one per GPU carrying its NVLink bytes."""
    N, g, R, L, k = tp.nodes, tp.gpn, tp.ranks, tp.layers, tp.k
    node = tp.node_of_rank
    c = tp.c_layer * fleet.het / elec.speed
    layer = np.mean(np.max(c.reshape(N, g)[None] * (1 + tp.sigma_layer * tp.z_gpu[:, None, :]), axis=2), axis=0)
    t_tp = tp.tp_s / (np.ones(N) if link is None else link)
    h = tp.h0 + (0.0 if host_extra is None else host_extra)
    h_max = h.reshape(N, g).max(axis=1)
    micro = h_max + L * (layer + t_tp)
    T = k * micro
    e_max = float(np.mean(np.max(T[None] + np.sqrt(k) * tp.sigma_mb * micro[None] * tp.z_node, axis=1)))

    rate = tp.rate_gbps * 1e9 / 8
    B = 2 * (N - 1) / N * tp.grad_bytes
    t_dp = B / (float(rate.min()) * tp.eta) + 2 * (N - 1) * tp.hop_s
    hidden = tp.beta * (2 / 3) * L * float(layer.min())  # under the last micro-step's backward
    t_exp = max(t_dp - hidden, tp.lam * t_dp)
    S = e_max + t_exp

    comp = np.zeros((R, N_ACT))
    comp[:, COMPUTE] = k * L * c
    comp[:, IDLE] = k * h
    comp[:, SPIN] = k * L * (layer[node] - c) + k * (h_max[node] - h)  # waiting for the TP group
    comp[:, XFER] = k * L * t_tp[node]
    comp /= T[node][:, None]
    segments = [
        (T[node], comp, float(np.mean(layer + t_tp))),
        (e_max - T[node], onehot(SPIN), 0.0),
        (np.full(R, t_exp), onehot(XFER), 0.0),
    ]
    nic, gpus = np.ones(N), np.ones(R)  # port rows: the nodes' NICs, then every GPU's NVLinks
    ports = [
        (
            np.full(N + R, S - t_dp),
            np.full(N + R, S),
            np.r_[B * nic, 0 * gpus],
            np.r_[tp.wait_base * B / rate, 0 * gpus],
        ),
        (np.zeros(N + R), np.r_[0 * nic, T[node]], np.r_[0 * nic, k * L * tp.tp_bytes * gpus], np.zeros(N + R)),
    ]
    return plan(S, t_exp, segments, ports, R)


def draw(rng: np.random.Generator) -> tuple[TP, Fleet]:
    nodes = log_uniform_int(rng, 2, 32)
    gpn = 8
    fleet = draw_fleet(rng, nodes, gpn)
    R = nodes * gpn
    k = int(rng.integers(1, 5))
    layers = int(rng.integers(16, 97))
    c_mb = float(np.exp(rng.uniform(np.log(0.15), np.log(2.0))))  # compute per micro-step at the top clock
    c_layer = c_mb / layers
    nv_bps = NVLINK_BPS[fleet.kind.name] * rng.uniform(0.7, 0.85)
    tp_s = rng.uniform(0.05, 0.35) * c_layer  # TP all-reduce / compute: activations are big
    link = 400.0 if rng.random() < 0.7 else 200.0
    eta = float(rng.uniform(0.7, 0.9))
    hop = float(rng.uniform(5e-6, 2e-5))
    dp_bytes = rng.uniform(0.05, 0.5) * k * c_mb * link * 1e9 / 8 * eta  # what each NIC sends per step
    tp = TP(
        nodes=nodes,
        gpn=gpn,
        k=k,
        layers=layers,
        c_layer=c_layer,
        tp_s=float(tp_s),
        tp_bytes=float(tp_s * nv_bps),
        nv_bps=float(nv_bps),
        sigma_layer=float(rng.uniform(0.003, 0.015)),
        sigma_mb=float(rng.uniform(0.01, 0.04)),
        h0=c_mb * rng.uniform(0.0, 0.02) * rng.uniform(0.5, 1.5, R),
        grad_bytes=float(dp_bytes * nodes / (2 * (nodes - 1))),
        rate_gbps=np.full(nodes, link),
        eta=eta,
        hop_s=hop,
        beta=float(rng.uniform(0.0, 0.6)),
        lam=float(rng.uniform(0.05, 0.25)),
        wait_base=rng.uniform(0.002, 0.03, nodes),
        z_gpu=_centred(rng.standard_normal((N_MC, gpn))),
        z_node=_centred(rng.standard_normal((N_MC, nodes))),
    )
    return tp, fleet


def link_share(x: float, mode: str) -> float:
    """The share of its NVLink bandwidth a degraded GPU keeps: `width` takes it as given (a setting),
    `replay` and `flapping` map the intensity x in [0, 1] to 1 .. 0.05."""
    return x if mode == "width" else 1.0 - 0.95 * x


def fault_state(
    tp: TP, fleet: Fleet, kind: str, where: tuple[int, ...], x: float, mode: str
) -> tuple[StepPlan, Electrical]:
    node, gpu = where[0], where[-1]
    rank = node * tp.gpn + gpu
    if kind in ("thermal", "power_cap"):
        elec = electrical(fleet, kind, rank, x)
        return step(tp, elec, fleet), elec
    if kind == "gpu_degraded":
        slow = degraded_fleet(fleet, rank, x)
        elec = degraded_electrical(fleet, rank, x)
        return stall_compute(step(tp, elec, slow), rank, x), elec
    elec = electrical(fleet)
    if kind == "slow_host":
        extra = host_gaps(tp.ranks, tp.gpn, node, int(tp.c_layer * 1e9), x, step(tp, elec, fleet).S, tp.k)
        return step(tp, elec, fleet, host_extra=extra), elec
    share = link_share(x, mode)
    links = np.ones(tp.nodes)
    links[node] = share
    what = {
        "width": f"one link retrained at {share:.0%} of its lanes",
        "replay": "one link corrupting flits, replaying",
        "flapping": "one link flapping, retraining over and over",
    }[mode]
    return step(tp, elec, fleet, link=links), dataclasses.replace(
        elec, detail=f"{what}: collectives at {share:.0%} of NVLink bandwidth"
    )


def _modes(rng: np.random.Generator, fleet: Fleet) -> Callable[[str], list[tuple[str, list[float] | None]]]:
    """A link trained down to fewer lanes (H100's links have 2, A100's 4: discrete shares), tried first half
    of the time, else a link that corrupts flits or one that keeps retraining (any share)."""
    lanes = LANES[fleet.kind.name]
    widths = [w / lanes for w in range(1, lanes)]

    def modes(kind: str) -> list[tuple[str, list[float] | None]]:
        if kind != "nvlink":
            return [("", None)]
        m: list[tuple[str, list[float] | None]] = [("replay", None), ("flapping", None)]
        m = m if rng.random() < 0.5 else m[::-1]
        return [("width", widths), *m] if rng.random() < 0.5 else [*m, ("width", widths)]

    return modes


def _checkpoints(rng: np.random.Generator, tp: TP, first: float, duration: float) -> list[Pause]:
    """Sharded synchronous checkpoints: a device-to-host snapshot, then every node writes (GPUs idle,
    its NIC streams to storage); no NVLink traffic."""
    if rng.random() < 0.4:
        return []
    pauses = []
    period = float(rng.uniform(1200, 3600))
    t = first + period
    while t < duration - 300:
        snap, write = float(rng.uniform(3, 20)), float(rng.uniform(20, 120))
        sent = np.concatenate([np.full(tp.nodes, rng.uniform(1e9, 4e9)), np.zeros(tp.ranks)])
        waits = np.concatenate([np.full(tp.nodes, rng.uniform(0.05, 0.3)), np.zeros(tp.ranks)])
        pauses += [snapshot(t, t + snap), shard_write(t + snap, t + snap + write, sent, waits)]
        t += snap + write + period
    return pauses


@dataclass
class BadLink:
    rank: int
    onset_s: float
    end_s: float
    share: float  # of its NVLink bandwidth the GPU keeps
    mode: str  # width (fewer lanes, or one link lost) or replay (corrupting flits)


def _cumulative_events(
    rng: np.random.Generator, case: Case, tx: np.ndarray, tp: TP, fault: BadLink | None
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Replay, recovery and CRC counters from what each GPU's links carried in each interval."""
    R, T = tx.shape
    dt = case.sample_s
    idx = np.arange(T)
    sent = np.zeros((R, T))
    for r in range(R):
        ok = np.isfinite(tx[r])
        filled = np.interp(idx, idx[ok], tx[r, ok])
        sent[r] = np.diff(filled, prepend=filled[0])
    replay, recovery, crc = np.zeros((R, T)), np.zeros((R, T)), np.zeros((R, T))
    decoys = ["nvlink_crc_bursts"]
    if fault is not None:
        r, onset, end, share = fault.rank, fault.onset_s, fault.end_s, fault.share
        starts = case.times - dt
        inside = np.clip(np.minimum(case.times, end) - np.maximum(starts, onset), 0.0, None) / dt
        busy_s = sent[r] * inside / (tp.nv_bps * share)  # seconds the links carried traffic
        lost_s = busy_s * (1.0 - share)  # of the stretched transfers, the time the bad link was not moving data
        if fault.mode == "replay":  # each replay costs a round trip of the replay buffer
            replay[r] += rng.poisson(lost_s / rng.uniform(1e-6, 4e-6))
            recovery[r] += rng.poisson(inside * dt / rng.uniform(30, 300))
        elif fault.mode == "flapping":  # each retraining takes the link down for tens of milliseconds
            flaps = rng.poisson(lost_s / rng.uniform(0.02, 0.2))
            recovery[r] += flaps
            replay[r] += rng.poisson(flaps * rng.uniform(10, 1000))  # what was in flight, sent again
        else:  # fewer lanes: slower but mostly clean, the lanes left still marginal
            replay[r] += rng.poisson(busy_s * rng.uniform(20, 500))
            recovery[r] += rng.poisson(inside * dt / rng.uniform(300, 1800))
            recovery[r, int(np.argmax(inside > 0))] += int(rng.integers(1, 4))  # the retraining itself
        crc[r] += rng.poisson(replay[r] * rng.uniform(0.3, 1.2))  # the same bad signal, received
        if rng.random() < 0.5:  # a marginal link often shows a few CRC errors before it degrades
            before = (case.times > onset - rng.uniform(300, 1800)) & (case.times <= onset)
            crc[r] += rng.poisson(before * dt / rng.uniform(20, 120))
    for _ in range(1 + int(rng.poisson(1.5))):  # a burst of bad flits on a healthy link, corrected
        crc[int(rng.integers(R)), int(rng.integers(T))] += int(rng.integers(1, 40))
    if rng.random() < 0.3:  # a slow drip of CRC errors on one GPU, for the whole job
        crc[int(rng.integers(R))] += rng.poisson(np.full(T, dt / rng.uniform(300, 3600)))
        decoys.append("nvlink_crc_drip")
    if rng.random() < 0.15:  # one retraining and its replays, over in milliseconds
        r, i = int(rng.integers(R)), int(rng.integers(T))
        recovery[r, i] += 1
        replay[r, i] += int(rng.integers(2, 200))
        crc[r, i] += int(rng.integers(2, 200))
        decoys.append("nvlink_recovery_blip")
    out = {}
    for key, events in (
        ("nvlink_replay_errors", replay),
        ("nvlink_recovery_errors", recovery),
        ("nvlink_crc_errors", crc),
    ):
        before_job = np.where(rng.random(R) < 0.1, rng.integers(1, 100, R), 0)  # counts since the driver loaded
        out[key] = np.where(np.isfinite(tx), before_job[:, None] + np.cumsum(events, axis=1), np.nan)
    return out, decoys


def generate(seed: int) -> Case:
    rng = rng_for(FAMILY, seed)
    target = design(FAMILY, seed)
    tp, fleet = draw(rng)
    duration = draw_duration(rng)
    N, R = tp.nodes, tp.ranks
    sample_s = scrape_interval(rng, R, duration)
    elec = electrical(fleet)
    clean = step(tp, elec, fleet)
    decoys = ["tp_layer_waits"]
    if np.any(elec.bits_act[COMPUTE] & 0x4):
        decoys.append("power_capped_healthy_gpus")
    init = _init(rng, R)
    ckpts = _checkpoints(rng, tp, init.end, duration)
    if ckpts:
        decoys.append("checkpoint_sharded")
    job = Job(
        family=FAMILY,
        seed=seed,
        rng=rng,
        nodes=N,
        gpus_per_node=tp.gpn,
        sample_s=sample_s,
        duration_s=duration,
        fleet=fleet,
        port_node=np.concatenate([np.arange(N), tp.node_of_rank]),
        port_gpu=np.concatenate([np.full(N, -1), np.tile(np.arange(tp.gpn), N)]),
        rate_gbps=np.concatenate([tp.rate_gbps, np.zeros(R)]),
        clean=clean,
        elec_clean=elec,
        pauses=[init, *ckpts],
        decoys=decoys,
        params={
            "gpu": fleet.kind.name,
            "layers": tp.layers,
            "k": tp.k,
            "step_s": clean.S,
            "tp_comm_share": tp.tp_s * tp.layers * tp.k / clean.S,
            "comm_exposed_s": clean.fixed,
            "link_gbps": float(tp.rate_gbps[0]),
            "nvlink_bytes_per_step": tp.tp_bytes * tp.layers * tp.k,
            "wait": "spin",
        },
    )
    draw_measurement(job)
    fault: BadLink | None = None
    if target is not None:

        def locate(kind: str) -> tuple[int, ...]:
            return int(rng.integers(N)), int(rng.integers(tp.gpn))

        def slowdown_of(kind: str, where: tuple[int, ...], x: float, mode: str) -> float:
            return fault_state(tp, fleet, kind, where, x, mode)[0].S / clean.S - 1

        weights = {"nvlink": 2.0, "thermal": 0.5, "power_cap": 0.5, "slow_host": 0.5, "gpu_degraded": 0.5}
        choice = pick_fault(rng, target, weights, locate, slowdown_of, _modes(rng, fleet))
        attach_fault(job, tp, fleet, choice, target, duration, 600.0, fault_state=fault_state)
        assert job.fault is not None
        if choice.kind == "nvlink":
            rank = choice.where[0] * tp.gpn + choice.where[1]
            share = link_share(choice.x, choice.mode)
            fault = BadLink(rank, job.fault.onset_s, job.fault.end_s, share, choice.mode)
    case = render(job)
    tel = case.telemetry
    tx = tel["xmit_bytes"][N:]
    for key in PORT_KEYS:
        tel[key] = tel[key][:N]
    case.port_node, case.port_gpu = case.port_node[:N], case.port_gpu[:N]
    tel["nvlink_tx_bytes"] = tx
    counters, more = _cumulative_events(rng, case, tx, tp, fault)
    tel.update(counters)
    case.decoys += more
    return case
