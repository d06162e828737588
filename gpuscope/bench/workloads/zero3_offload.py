"""zero3_offload: ZeRO-3 / FSDP training with the optimizer (and sometimes the parameters) in host memory.

Layout. N nodes x 8 GPUs, one NIC per node or one per GPU (rails). Every rank holds a 1/R shard of the
parameters, gradients and optimizer state; the fp32 master weights and Adam moments of its shard live
in host memory and the optimizer runs on the CPU (DeepSpeed ZeRO-Offload / ZeRO-Infinity, FSDP with CPU
offload). With parameter offload the bf16 shard lives there too and is fetched over PCIe layer by layer.

Step.
1. Forward, L layers: all-gather each layer's parameters (a ring per rail over every node, prefetched
   under the previous layer's compute; with parameter offload each rank first copies its shard up over
   PCIe), then compute. The gathers are barriers: a layer ends when its slowest rank is done, ranks done
   early spin in the NCCL kernel; what the prefetch cannot hide is exposed, every rank in the transfer.
2. Backward (kappa x the compute): re-gather and reduce-scatter the gradients, the same way.
3. Offload: every rank copies its gradient shard down over its PCIe link (a share of it already under
   the backward), the node's CPUs run Adam on the shards (memory bound: the node's sockets and memory
   bandwidth are shared by its 8 ranks), the updated parameters go back up; copies and CPU work overlap
   in part (sub-group pipelining). The GPU has nothing to run but a few light kernels (unscale, norm):
   utilisation and activity ~0, clocks up or, in long phases, lowered (0x1), idle power; InfiniBand is
   quiet. This phase is 20-60% of the step. The next step's first gather cannot start before the last
   rank has its parameters back: the others wait, spinning in the gather kernel or, where the framework
   syncs on the host (a CPU-side barrier / gloo all-reduce of the global norm), idle like the culprit.
Host time jitters from step to step (OS noise, page cache, memory bandwidth), per node, so every step
waits for whichever node was slowest: the expected maximum is in the clean step.

Faults:
- gpu_degraded: a GPU's HBM stalls (compute slower at normal clocks, no reason bit, less tensor activity
  per second of compute, less power), or its PCIe link trained down (x16 -> x8/x4, Gen5 -> Gen4/Gen3):
  its copies slow, its offload phase lengthens and everyone waits; its GPU telemetry is that of an idle
  GPU either way;
- thermal / power_cap: a GPU computes slower (lower clock, 0x20 / 0x4), cooling in every offload phase;
- slow_host: the node's CPU Adam slower (contention, throttled CPU, a memory channel lost) with its
  per-layer launches, or the node's PCIe links trained down: its offload phase lengthens;
- slow_nic: a link trained at a lower rate or a credit-stalled port: the gathers and reduce-scatters of
  every rank slow, more exposed transfer in the forward and backward.
A fault that lengthens the offload phase is not localisable where the others wait on the host (idle
like the culprit: nothing in the telemetry here tells them apart).
Decoys: host jitter, checkpoints (the job stops while host-resident optimizer state is written), page
cache writeback after them slowing every node's CPU phase for minutes, data-loader stalls, healthy GPUs
at their power limit, a slow die, a hot slot, a noisy port, an exporter outage.
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
from gpuscope.bench.workloads._faults import DOWNTRAINED, memory_stalls, nic_detail, nic_shares, record
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
from gpuscope.bench.workloads._regimes import Regime, render_regimes

FAMILY = "zero3_offload"
N_MC = 64
SAMPLES = (5.0, 10.0, 15.0, 20.0, 30.0)
PCIE_DOWN = (0.5, 0.25)  # x16 -> x8 or Gen5 -> Gen4; x16 -> x4 or Gen5 -> Gen3


@dataclass
class Zero3:
    nodes: int
    gpn: int
    rails: bool
    L: int
    kappa: float  # backward compute / forward compute
    c0: float  # forward compute per layer at the top clock, s
    sigma: float  # per-layer compute jitter
    h0: np.ndarray  # (R,) host launch gap per layer (ZeRO-3's hooks run on the CPU)
    ag_bytes: float  # bytes per port per layer's all-gather
    rs_bytes: float  # bytes per port per layer's reduce-scatter
    eta: float
    hop_s: float
    rate_gbps: np.ndarray  # (P,)
    w_ring: np.ndarray  # (P,) baseline credit wait per transmit second
    pf_bytes: float  # bytes per rank per layer fetched over PCIe (parameter offload; 0 otherwise)
    grad_bytes: float  # bytes per rank per step copied down
    upd_bytes: float  # bytes per rank per step copied up after the update
    hidden: float  # share of the gradient copy done under the backward
    pcie_bps: float  # a healthy GPU's effective PCIe rate, bytes/s
    cpu_s: np.ndarray  # (N,) CPU Adam seconds per step on each node
    omega: float  # overlap of PCIe copies and CPU work in the offload phase
    sigma_h: float  # per-step host jitter (per node)
    light_s: float  # seconds of light GPU kernels in the offload phase
    deep: float  # share of a GPU's idle offload time spent at lowered clocks
    wait_act: int  # SPIN: the others wait in the gather kernel; IDLE: on the host
    z: np.ndarray  # (N_MC, R) forward jitter draws
    zb: np.ndarray  # (N_MC, R) backward jitter draws
    zh: np.ndarray  # (N_MC, N) host jitter draws

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpn

    @property
    def rails_n(self) -> int:
        return self.gpn if self.rails else 1

    @property
    def ports(self) -> int:
        return self.nodes * self.rails_n


@dataclass
class State:
    plan: StepPlan
    secs: np.ndarray  # (R, A) seconds per activity per step
    offload: float  # the offload phase, s (the slowest rank's, in expectation)
    t_off: np.ndarray  # (R,) each rank's own offload work


def evaluate(
    z: Zero3,
    fleet: Fleet,
    elec: Electrical,
    *,
    cpu_mult: float = 1.0,
    deg: np.ndarray | None = None,
    pcie_f: np.ndarray | None = None,
    host_f: np.ndarray | None = None,
    txf: np.ndarray | None = None,
    rxf: np.ndarray | None = None,
) -> State:
    """The step: cpu_mult slows every node's CPU phase (writeback contention); deg (R,) a compute time
    multiplier at normal clocks; pcie_f (R,) PCIe rate shares; host_f (N,) a node's CPU slowdown; txf /
    rxf (P,) egress and trained link rates as shares of nominal."""
    N, gpn, L, R, c = z.nodes, z.gpn, z.L, z.ranks, z.rails_n
    node = np.arange(R) // gpn
    hf = np.ones(N) if host_f is None else host_f
    cpt = fleet.het / elec.speed * (1.0 if deg is None else deg) * z.c0
    h = z.h0 * hf[node]
    Wf = float(np.mean(np.max(h + cpt * (1 + z.sigma * z.z), axis=1)))
    Wb = float(np.mean(np.max(h + z.kappa * cpt * (1 + z.sigma * z.zb), axis=1)))

    rate = z.rate_gbps * 1e9 / 8
    txr = (rate * (1.0 if txf is None else txf)).reshape(N, c)
    link = (rate * (1.0 if rxf is None else rxf)).reshape(N, c)
    ring = np.minimum(txr, np.roll(link, -1, axis=0))  # what a port can push to its ring successor
    slowest = float(ring.min()) * z.eta
    t_ag = z.ag_bytes / slowest + (N - 1) * z.hop_s
    t_rs = z.rs_bytes / slowest + (N - 1) * z.hop_s
    pcie = z.pcie_bps * (np.ones(R) if pcie_f is None else pcie_f)
    t_pf = z.pf_bytes / pcie
    chain_f = float(t_pf.max()) + t_ag
    chain_b = float(t_pf.max()) + t_ag + t_rs
    Xf, Xb = max(0.0, chain_f - Wf), max(0.0, chain_b - Wb)
    F = chain_f + L * (Wf + Xf)
    Bw = L * (Wb + Xb) + t_rs
    # a rank whose own copy comes last waits for it with nothing to run (idle), the others in the gather
    own_f = np.minimum(Xf, t_pf - t_pf.min()) * L + (t_pf - t_pf.min())
    own_b = np.minimum(Xb, t_pf - t_pf.min()) * L

    pc = ((1 - z.hidden) * z.grad_bytes + z.upd_bytes) / pcie
    cpu = (z.cpu_s * hf * cpu_mult)[node]
    t_off = cpu + pc - z.omega * np.minimum(cpu, pc) + z.light_s
    off = float(np.mean(np.max(t_off[None, :] * (1 + z.sigma_h * z.zh[:, node]), axis=1)))
    S = F + Bw + off

    def phase(k: float, T: float, exposed: float, own: np.ndarray) -> np.ndarray:
        out = np.zeros((R, N_ACT))
        out[:, COMPUTE] = L * k * cpt
        out[:, IDLE] = L * h + own
        out[:, XFER] = exposed - own
        out[:, SPIN] = np.maximum(T - out.sum(axis=1), 0.0)
        return out

    ph_f = phase(1.0, F, chain_f + L * Xf, own_f)
    ph_b = phase(z.kappa, Bw, L * Xb + t_rs, own_b)
    idle_own = mix(idle=1 - z.deep, deep_idle=z.deep)
    if z.light_s > 0:
        own_comp = np.outer((t_off - z.light_s) / t_off, idle_own) + np.outer(z.light_s / t_off, onehot(LIGHT))
    else:
        own_comp = np.broadcast_to(idle_own, (R, N_ACT))
    wait_comp = onehot(SPIN) if z.wait_act == SPIN else idle_own  # on the host: as idle as the culprit
    segments = [
        (np.full(R, F), ph_f / F, F / L),
        (np.full(R, Bw), ph_b / Bw, Bw / L),
        (t_off, own_comp, 1.0),
        (off - t_off, wait_comp, 1.0),
    ]
    secs = ph_f + ph_b + t_off[:, None] * own_comp + (off - t_off)[:, None] * wait_comp[None, :]

    P = z.ports
    per_byte = (
        np.maximum(1.0 / ring - 1.0 / txr, 0.0)
        + np.maximum(1.0 / txr - 1.0 / link, 0.0)
        + z.w_ring.reshape(N, c) / link
    ).reshape(-1)
    fwd = (L + 1) * z.ag_bytes
    bwd = L * (z.ag_bytes + z.rs_bytes)
    ports = [
        (np.zeros(P), np.full(P, F), np.full(P, fwd), fwd * per_byte),
        (np.full(P, F), np.full(P, F + Bw), np.full(P, bwd), bwd * per_byte),
    ]
    fixed = chain_f + t_rs + L * (Xf + Xb) + off  # what does not scale with the GPUs' compute drift
    return State(plan(S, fixed, segments, ports, R), secs, off, t_off)


# ---------------------------------------------------------------------------------------------------------
# drawing a job


def draw(rng: np.random.Generator) -> tuple[Zero3, Fleet, list[str]]:
    nodes = log_uniform_int(rng, 2, 32)
    gpn = 8
    fleet = draw_fleet(rng, nodes, gpn)
    R = nodes * gpn
    decoys = ["host_jitter"]
    decoys += fleet_decoys(rng, fleet)
    rails = bool(rng.random() < 0.5)
    P = nodes * (gpn if rails else 1)
    L = log_uniform_int(rng, 24, 96)
    kappa = 3.0 if rng.random() < 0.6 else 2.0  # activation recomputation is the rule with offload
    c_step = float(np.exp(rng.uniform(np.log(2.0), np.log(20.0))))
    c0 = c_step / (L * (1 + kappa))
    link = 400.0 if rng.random() < 0.7 else 200.0
    rate = link * 1e9 / 8
    eta = float(rng.uniform(0.7, 0.9))
    hop = float(rng.uniform(5e-6, 2e-5))
    ag_time = rng.uniform(0.2, 1.1) * c0  # one layer's gather / its forward compute
    ag_bytes = max(ag_time - (nodes - 1) * hop, 0.2 * ag_time) * rate * eta
    w_ring = rng.uniform(0.002, 0.03, P)
    decoys += noisy_port(rng, w_ring)
    param_offload = rng.random() < 0.35
    pcie_bps = (rng.uniform(40, 52) if rng.random() < 0.7 else rng.uniform(20, 26)) * 1e9
    zd = rng.standard_normal((3, N_MC, max(R, nodes)))
    z = Zero3(
        nodes=nodes,
        gpn=gpn,
        rails=rails,
        L=L,
        kappa=kappa,
        c0=c0,
        sigma=float(rng.uniform(0.01, 0.04)),
        h0=c0 * rng.uniform(0.0, 0.03) * rng.uniform(0.5, 1.5, R),
        ag_bytes=float(ag_bytes),
        rs_bytes=float(ag_bytes * (2.0 if rng.random() < 0.3 else 1.0)),  # fp32 gradient reduction
        eta=eta,
        hop_s=hop,
        rate_gbps=np.full(P, link),
        w_ring=w_ring,
        pf_bytes=float(rng.uniform(0.1, 0.6) * c0 * pcie_bps) if param_offload else 0.0,
        grad_bytes=0.0,
        upd_bytes=0.0,
        hidden=float(rng.uniform(0.0, 0.6)),
        pcie_bps=float(pcie_bps),
        cpu_s=np.zeros(nodes),
        omega=float(rng.uniform(0.3, 0.8)),
        sigma_h=float(rng.uniform(0.02, 0.08)),
        light_s=0.0,
        deep=0.0,
        wait_act=SPIN if rng.random() < 0.7 else IDLE,
        z=zd[0, :, :R] - zd[0, :, :R].mean(axis=0),
        zb=zd[1, :, :R] - zd[1, :, :R].mean(axis=0),
        zh=zd[2, :, :nodes] - zd[2, :, :nodes].mean(axis=0),
    )
    # the offload phase: a share psi of the step, its raw work split between PCIe copies and the CPU
    compute = evaluate(z, fleet, electrical(fleet)).plan.S
    psi = rng.uniform(0.2, 0.6)
    target = psi / (1 - psi) * compute
    light = target * rng.uniform(0.01, 0.05)
    pi = rng.uniform(0.2, 0.6)
    raw = (target - light) / (1 - z.omega * min(pi, 1 - pi)) / (1 + 1.5 * z.sigma_h)
    pc, cpu = pi * raw, (1 - pi) * raw
    ratio = 2.0 if rng.random() < 0.5 else 1.0  # fp32 or bf16 gradients copied down, bf16 parameters up
    upd = pc * pcie_bps / ((1 - z.hidden) * ratio + 1)
    z.grad_bytes, z.upd_bytes = float(ratio * upd), float(upd)
    z.cpu_s = cpu * np.clip(rng.normal(1.0, 0.01, nodes), 0.975, 1.025)
    z.light_s = float(light)
    z.deep = float(rng.uniform(0.0, 0.6) * np.clip((target - 1.0) / 3.0, 0.0, 1.0))  # clocks drop in long idles
    return z, fleet, decoys


def _around(
    rng: np.random.Generator, z: Zero3, first_step: float, duration: float
) -> tuple[list[Pause], list[tuple[float, float, float]]]:
    """Checkpoints (the job stops while each rank writes its host-resident optimizer state), then minutes of
    page-cache writeback competing with CPU Adam for memory bandwidth on every node; data-loader stalls."""
    pauses: list[Pause] = []
    contention = []
    period = float(rng.uniform(1200, 3600))
    t = first_step + period * float(rng.uniform(0.3, 1.0))
    while t < duration - 600:
        write = float(rng.uniform(30, 240))
        pauses.append(
            Pause(
                t,
                t + write,
                mix(deep_idle=0.85, idle=0.1, light=0.05),
                grain=2.0,
                name="checkpoint",
                port_bytes_s=np.full(z.ports, rng.uniform(1e9, 4e9) / z.rails_n),
                port_wait_s=np.full(z.ports, rng.uniform(0.02, 0.2)),
            )
        )
        if rng.random() < 0.7:
            contention.append((t + write, t + write + float(rng.uniform(180, 600)), float(rng.uniform(1.1, 1.4))))
        t += write + period
    if rng.random() < 0.4:  # data loader hiccups: every rank stalls inside its steps
        start = float(rng.uniform(first_step, duration - 900))
        pauses.append(
            Pause(
                start,
                start + float(rng.uniform(60, 300)),
                onehot(IDLE),
                0.0,
                "loader stall",
                True,
                float(rng.uniform(0.05, 0.2)),
            )
        )
    return pauses, contention


# ---------------------------------------------------------------------------------------------------------
# faults


def fault_inputs(
    z: Zero3, fleet: Fleet, kind: str, where: tuple[int, ...], x: float, mode: str
) -> tuple[Electrical, dict[str, np.ndarray], Fleet | None, str]:
    R = z.ranks
    node = where[0]
    if kind in ("thermal", "power_cap"):
        elec = electrical(fleet, kind, node * z.gpn + where[1], x)
        return elec, {}, None, elec.detail
    if kind == "gpu_degraded":
        rank = node * z.gpn + where[1]
        if mode == "pcie":
            pcie_f = np.ones(R)
            pcie_f[rank] = x
            lanes = "x16 -> x8 (or Gen5 -> Gen4)" if x == 0.5 else "x16 -> x4 (or Gen5 -> Gen3)"
            return electrical(fleet), {"pcie_f": pcie_f}, None, f"PCIe link trained down, {lanes}"
        fault_fleet, deg, detail = memory_stalls(fleet, rank, x)
        return electrical(fault_fleet), {"deg": deg}, fault_fleet, detail
    elec = electrical(fleet)
    if kind == "slow_host":
        if mode == "pcie":
            pcie_f = np.ones(R)
            pcie_f[node * z.gpn : (node + 1) * z.gpn] = x
            return elec, {"pcie_f": pcie_f}, None, f"node's PCIe links trained at {x:.0%} of their rate"
        host_f = np.ones(z.nodes)
        host_f[node] = 1.0 + 3.0 * x
        return (
            elec,
            {"host_f": host_f},
            None,
            f"host CPU phase {host_f[node]:.2f}x slower (contention, memory bandwidth)",
        )
    txf, rxf = nic_shares(z.ports, where[1], x, mode)
    return elec, {"txf": txf, "rxf": rxf}, None, nic_detail(z.rate_gbps, where[1], x, mode)


def _modes(rng: np.random.Generator, kind: str) -> list[tuple[str, list[float] | None]]:
    both: dict[str, list[tuple[str, list[float] | None]]] = {
        "slow_nic": [("downtrained", list(DOWNTRAINED)), ("congested", None)],
        "gpu_degraded": [("pcie", list(PCIE_DOWN)), ("memory", None)],
        "slow_host": [("pcie", list(PCIE_DOWN)), ("cpu", None)],
    }
    if kind not in both:
        return [("", None)]
    m = both[kind]
    if kind == "slow_host":  # a slow CPU is far more common than a node's links all trained down
        return m if rng.random() < 0.25 else m[::-1]
    return m if rng.random() < 0.5 else m[::-1]


# ---------------------------------------------------------------------------------------------------------


def generate(seed: int) -> Case:
    rng = rng_for(FAMILY, seed)
    target = design(FAMILY, seed)
    z, fleet, decoys = draw(rng)
    duration = draw_duration(rng)
    R = z.ranks
    sample_s = float(rng.choice(SAMPLES))
    elec_clean = electrical(fleet)
    if np.any(elec_clean.bits_act[COMPUTE] & 0x4):
        decoys.append("power_capped_healthy_gpus")
    init = _init(rng, R)
    pauses, contention = _around(rng, z, init.end, duration)
    if any(p.name == "checkpoint" for p in pauses):
        decoys.append("checkpoint")
    if contention:
        decoys.append("writeback_contention")
    if any(p.stall for p in pauses):
        decoys.append("loader_stall")

    # regimes: the base step, and stretches (on the sample grid) where every node's CPU phase is slower
    grid = lambda t: float(np.round(t / sample_s) * sample_s)  # noqa: E731
    cuts = [(0.0, 1.0)]
    for a, b, mult in contention:
        cuts += [(grid(a), mult), (grid(min(b, duration)), 1.0)]
    starts = np.array([t for t, _ in cuts])
    mults = [mu for _, mu in cuts]
    base = {mu: evaluate(z, fleet, elec_clean, cpu_mult=mu) for mu in set(mults)}
    clean = base[1.0]
    port_node, port_gpu = ports_of(z.nodes, z.gpn, z.rails)
    job = Job(
        family=FAMILY,
        seed=seed,
        rng=rng,
        nodes=z.nodes,
        gpus_per_node=z.gpn,
        sample_s=sample_s,
        duration_s=duration,
        fleet=fleet,
        port_node=port_node,
        port_gpu=port_gpu,
        rate_gbps=z.rate_gbps,
        clean=clean.plan,
        elec_clean=elec_clean,
        pauses=[init, *pauses],
        decoys=decoys,
        params={
            "gpu": fleet.kind.name,
            "layers": z.L,
            "rails": z.rails,
            "parameter_offload": z.pf_bytes > 0,
            "step_s": clean.plan.S,
            "offload_s": clean.offload,
            "offload_share": clean.offload / clean.plan.S,
            "wait": "spin" if z.wait_act == SPIN else "idle",
            "link_gbps": float(z.rate_gbps[0]),
            "pcie_gbs": z.pcie_bps / 1e9,
            "contention": contention,
        },
    )
    draw_measurement(job, drift=(0.003, 0.01))
    fault_fleet = None
    faulty: list[StepPlan | None] = [None] * len(starts)
    if target is not None:
        onset, end = draw_window(rng, duration)
        ends = np.append(starts[1:], duration)
        span = np.clip(np.minimum(ends, end) - np.maximum(starts, onset), 0.0, None)
        weight: dict[float, float] = {}
        for mu, w in zip(mults, span, strict=True):
            weight[mu] = weight.get(mu, 0.0) + float(w)

        def slowdown_of(kind: str, where: tuple[int, ...], x: float, mode: str) -> float:
            elec, args, _, _ = fault_inputs(z, fleet, kind, where, x, mode)
            ratio = [
                w * evaluate(z, fleet, elec, cpu_mult=mu, **args).plan.S / base[mu].plan.S
                for mu, w in weight.items()
                if w > 0
            ]
            return float(np.sum(ratio) / sum(weight.values()) - 1)

        def locate(kind: str) -> tuple[int, ...]:
            node = int(rng.integers(z.nodes))
            gpu = int(rng.integers(z.gpn))
            return (node, node * z.rails_n + (gpu if z.rails else 0)) if kind == "slow_nic" else (node, gpu)

        choice = pick_fault(
            rng,
            target,
            {"gpu_degraded": 1.0, "thermal": 1.0, "power_cap": 1.0, "slow_host": 1.0, "slow_nic": 1.0},
            locate,
            slowdown_of,
            lambda kind: _modes(rng, kind),
        )
        elec_f, args, fault_fleet, detail = fault_inputs(z, fleet, choice.kind, choice.where, choice.x, choice.mode)
        faulty_at = {mu: evaluate(z, fleet, elec_f, cpu_mult=mu, **args).plan for mu in weight}
        for k, mu in enumerate(mults):
            if span[k] > 0:
                faulty[k] = faulty_at[mu]
        offload_fault = choice.kind == "slow_host" or choice.mode == "pcie"
        job.elec_fault = elec_f
        localisable = not (offload_fault and z.wait_act == IDLE)
        job.fault = record(rng, choice, z.gpn, elec_f, (onset, end), target, detail, localisable)
    regimes = [Regime(float(s), base[mu].plan, f) for s, mu, f in zip(starts, mults, faulty, strict=True)]
    return render_regimes(job, regimes, fault_fleet, phase_jitter=float(rng.uniform(0.01, 0.04)))
