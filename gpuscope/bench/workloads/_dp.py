"""The synchronous data-parallel step, shared by spin_dp, yield_dp, grad_accum, startup_and_pauses and rail.

One optimizer step on rank r: k micro-steps, each an exposed host gap h_r (data not ready, kernels not
launched yet: the GPU idles) and compute c_r = c0 * het_r / speed_r (speed from the GPU's clock, see
_gpu). Per-step compute jitters by sigma (sequence lengths, allocator, kernel choice), independently
per rank, so the k micro-steps arrive at the gradient all-reduce at a_r = k (h_r + c_r) + noise.

The all-reduce cannot finish before the last rank arrives: the step lasts E[max_r a_r] + the exposed
communication. Every other rank waits E[max] - E[a_r]; where that wait happens is the family's
framework: inside the NCCL kernel, spinning (util 100%, a few SMs busy, tensor pipes idle, spin power),
or on the CPU before the collective is launched (GPU idle). E[max] is taken over a fixed set of normal
draws, so even a clean job pays the expected maximum of its ranks' jitter, larger with more ranks.

Communication. A hierarchical ring all-reduce of G gradient bytes: each node sends 2(N-1)/N * G over
its NIC; with rail-optimised nodes the gradient is split over gpus_per_node rails, each its own ring
across the nodes. A ring moves at the pace of its slowest link (bandwidth efficiency eta), plus a
latency of 2(N-1) hops. DDP buckets let comm overlap the backward of the last micro-step: up to beta of
the slowest rank's compute can hide it, never the last bucket (lam of the comm).

The network, in credit-based flow control (InfiniBand):
- a link trained at a lower rate sends at that rate without waiting, but the switch cannot drain what its
  ring predecessor sends towards it, so the predecessor's port accrues xmit_wait;
- a congested port (bad cable retrying, a switch egress short of buffers) has data and no credits: its own
  xmit_wait rises, its reported rate does not change.
Every port has a small baseline wait (incast, shared uplinks); all ports of a ring carry the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuscope.bench.workloads import Case
from gpuscope.bench.workloads._common import (
    Choice,
    design,
    draw_duration,
    draw_window,
    fleet_decoys,
    log_uniform_int,
    noisy_port,
    pick_fault,
    rng_for,
)
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
from gpuscope.bench.workloads._faults import ElectricalOf, Inputs, StepModel, nic_modes, rank_fault, record
from gpuscope.bench.workloads._gpu import COMPUTE, IDLE, SPIN, XFER, Electrical, Fleet, draw_fleet, electrical

N_MC = 96


@dataclass
class DP:
    nodes: int
    gpn: int
    k: int  # micro-steps per optimizer step
    wait_act: int  # SPIN or IDLE
    rails: bool
    c0: float  # compute seconds per micro-step at the top clock
    h0: np.ndarray  # (R,) normal exposed host gap per micro-step
    sigma: float  # per-micro-step compute jitter
    grad_bytes: float
    rate_gbps: np.ndarray  # (P,)
    eta: float
    hop_s: float
    beta: float
    lam: float
    wait_base: np.ndarray  # (P,) baseline share of transmit time spent waiting for credits
    z: np.ndarray  # (N_MC, R)
    port_node: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    port_gpu: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpn

    @property
    def rails_n(self) -> int:
        return self.gpn if self.rails else 1

    def bytes_per_port(self) -> float:
        return 2 * (self.nodes - 1) / self.nodes * self.grad_bytes / self.rails_n

    def ring_pred(self, port: int) -> int:
        """The port whose traffic flows into `port`'s node on its ring."""
        node, rail = int(self.port_node[port]), port % self.rails_n
        return ((node - 1) % self.nodes) * self.rails_n + rail


def _centred(z: np.ndarray) -> np.ndarray:
    """Draws with zero mean per rank, so the mean of the maximum is never below any rank's mean."""
    return z - z.mean(axis=0, keepdims=True)


def ports_of(nodes: int, gpn: int, rails: bool) -> tuple[np.ndarray, np.ndarray]:
    if rails:
        return np.repeat(np.arange(nodes), gpn), np.tile(np.arange(gpn), nodes)
    return np.arange(nodes), np.full(nodes, -1)


def step(
    dp: DP,
    elec: Electrical,
    fleet: Fleet,
    host_extra: np.ndarray | None = None,
    port_eff: np.ndarray | None = None,
    downtrained: int | None = None,
    congested: int | None = None,
) -> StepPlan:
    R, P = dp.ranks, len(dp.port_node)
    k = dp.k
    c = dp.c0 * fleet.het / elec.speed
    h = dp.h0 + (host_extra if host_extra is not None else 0.0)
    mean = k * (h + c)
    spread = np.sqrt(k) * np.sqrt((dp.sigma * c) ** 2 + (0.5 * h) ** 2)
    e_max = float(np.mean(np.max(mean[None, :] + spread[None, :] * dp.z, axis=1)))
    wait = e_max - mean

    eff = np.ones(P) if port_eff is None else port_eff
    rate = dp.rate_gbps * 1e9 / 8  # bytes/s
    B = dp.bytes_per_port()
    rails = dp.rails_n
    t_rail = [B / (np.min((rate * eff)[r::rails]) * dp.eta) for r in range(rails)]
    t_comm = max(t_rail) + 2 * (dp.nodes - 1) * dp.hop_s
    hidden = dp.beta * float(np.max(c))
    t_exp = max(t_comm - hidden, dp.lam * t_comm)
    S = e_max + t_exp

    wait_s = dp.wait_base * B / rate
    if downtrained is not None:
        pred = dp.ring_pred(downtrained)
        wait_s = wait_s.copy()
        wait_s[pred] += B * (1 / (rate[downtrained] * eff[downtrained]) - 1 / rate[pred])
    if congested is not None:
        wait_s = wait_s.copy()
        wait_s[congested] += B * (1 / (rate[congested] * eff[congested]) - 1 / rate[congested])

    if k == 1:
        first = [(h, onehot(IDLE), 0.0), (c, onehot(COMPUTE), 0.0)]
    else:
        share = np.stack([h / (h + c), c / (h + c)], axis=1)
        comp = np.zeros((R, 6))
        comp[:, IDLE], comp[:, COMPUTE] = share[:, 0], share[:, 1]
        first = [(mean, comp, float(np.mean(h + c))), (np.zeros(R), onehot(COMPUTE), 0.0)]
    segments = [*first, (wait, onehot(dp.wait_act), 0.0), (np.full(R, t_exp), onehot(XFER), 0.0)]
    ports = [(np.full(P, S - t_comm), np.full(P, S), np.full(P, B), wait_s)]
    return plan(S, t_exp, segments, ports, R)


# ---------------------------------------------------------------------------------------------------------
# drawing a data-parallel job


@dataclass
class Extras:
    """What a family adds around the steady step: pauses and stalls, a slow start, decoys."""

    pauses: list[Pause] = field(default_factory=list)
    ramp: tuple[float, float, float] | None = None
    decoys: list[str] = field(default_factory=list)
    earliest_fault_s: float = 600.0


def draw_dp(
    rng: np.random.Generator,
    *,
    wait_act: int,
    rails: bool,
    k_range: tuple[int, int] = (1, 1),
    nodes_range: tuple[int, int] = (2, 64),
    c0_range: tuple[float, float] = (0.25, 4.0),
) -> tuple[DP, Fleet, list[str]]:
    nodes = log_uniform_int(rng, *nodes_range)
    gpn = 8 if (rails or rng.random() < 0.85) else 4
    fleet = draw_fleet(rng, nodes, gpn)
    decoys = fleet_decoys(rng, fleet)
    k = int(rng.integers(k_range[0], k_range[1] + 1))
    ring = draw_ring(rng, nodes, gpn, rails, c0_range)
    decoys += noisy_port(rng, ring.wait_base)
    dp = ring_dp(rng, ring, nodes, gpn, k=k, wait_act=wait_act, rails=rails)
    return dp, fleet, decoys


@dataclass
class Ring:
    """A drawn gradient ring: compute per micro-step at the top clock, link rate, bandwidth efficiency,
    hop latency, the gradient bytes that make a clean transfer rho x the compute, each port's baseline
    credit wait."""

    c0: float
    link: float
    eta: float
    hop: float
    grad_bytes: float
    wait_base: np.ndarray


def draw_ring(
    rng: np.random.Generator,
    nodes: int,
    gpn: int,
    rails: bool,
    c0_range: tuple[float, float],
    rho_range: tuple[float, float] = (0.05, 0.6),
) -> Ring:
    c0 = float(np.exp(rng.uniform(np.log(c0_range[0]), np.log(c0_range[1]))))
    rho = rng.uniform(*rho_range)  # clean comm time / compute time of one micro-step
    link = 400.0 if rng.random() < 0.7 else 200.0
    eta = rng.uniform(0.7, 0.9)
    hop = rng.uniform(5e-6, 2e-5)
    n_rails = gpn if rails else 1
    bw_time = max(rho * c0 - 2 * (nodes - 1) * hop, 0.2 * rho * c0)
    B = bw_time * link * 1e9 / 8 * eta
    grad_bytes = B * n_rails * nodes / (2 * (nodes - 1))
    return Ring(c0, link, float(eta), float(hop), grad_bytes, rng.uniform(0.002, 0.03, nodes * n_rails))


def ring_dp(
    rng: np.random.Generator,
    ring: Ring,
    nodes: int,
    gpn: int,
    *,
    k: int,
    wait_act: int,
    rails: bool,
    beta_max: float = 0.6,
) -> DP:
    """The data-parallel step model on a drawn ring, its host gaps, jitter and overlap drawn."""
    R = nodes * gpn
    port_node, port_gpu = ports_of(nodes, gpn, rails)
    return DP(
        nodes=nodes,
        gpn=gpn,
        k=k,
        wait_act=wait_act,
        rails=rails,
        c0=ring.c0,
        h0=ring.c0 * rng.uniform(0.0, 0.02) * rng.uniform(0.5, 1.5, R),
        sigma=float(rng.uniform(0.01, 0.05)),
        grad_bytes=ring.grad_bytes,
        rate_gbps=np.full(len(port_node), ring.link),
        eta=ring.eta,
        hop_s=ring.hop,
        beta=float(rng.uniform(0.0, beta_max)),
        lam=float(rng.uniform(0.05, 0.25)),
        wait_base=ring.wait_base,
        z=_centred(rng.standard_normal((N_MC, R))),
        port_node=port_node,
        port_gpu=port_gpu,
    )


def fault_state(
    dp: DP, fleet: Fleet, kind: str, where: tuple[int, ...], x: float, mode: str
) -> tuple[StepPlan, Electrical]:
    """The step and electrical state with the fault `kind` at `where` and intensity x."""
    return fault_step(dp, fleet, rank_fault(kind, where, x, mode, step_model(dp, fleet)), where, mode)


def step_model(dp: DP, fleet: Fleet, electrical_of: ElectricalOf | None = None) -> StepModel:
    """The data-parallel step as rank_fault sees it: a slow host's gap comes before each of k micro-steps."""
    return StepModel(
        fleet, len(dp.port_node), lambda elec: step(dp, elec, fleet).S, int(dp.c0 * 1e6), dp.k, electrical_of
    )


def fault_step(dp: DP, fleet: Fleet, f: Inputs, where: tuple[int, ...], mode: str) -> tuple[StepPlan, Electrical]:
    """The step with a fault's inputs: a slowed port's ring predecessor waits for credits (a link trained
    lower) or the port itself does (congested)."""
    port = where[1] if f.tx is not None else None
    downtrained = port if mode == "downtrained" else None
    congested = port if mode != "downtrained" else None
    return step(dp, f.elec, fleet, f.host_extra, f.tx, downtrained, congested), f.elec


def build(
    family: str,
    seed: int,
    *,
    wait_act: int,
    rails: bool = False,
    k_range: tuple[int, int] = (1, 1),
    weights: dict[str, float] | None = None,
    extras: Callable[[np.random.Generator, DP, float, float], Extras] | None = None,
    c0_range: tuple[float, float] = (0.25, 4.0),
) -> Case:
    rng = rng_for(family, seed)
    target = design(family, seed)
    dp, fleet, decoys = draw_dp(rng, wait_act=wait_act, rails=rails, k_range=k_range, c0_range=c0_range)
    duration = draw_duration(rng)
    sample_s = sample_grid(rng, dp.ranks, duration)
    elec_clean = electrical(fleet)
    clean = step(dp, elec_clean, fleet)
    if np.any(elec_clean.bits_act[COMPUTE] & 0x4):
        decoys.append("power_capped_healthy_gpus")
    ex = extras(rng, dp, clean.S, duration) if extras is not None else Extras(pauses=[_init(rng, dp.ranks)])
    decoys += ex.decoys

    job = dp_job(
        family,
        seed,
        rng,
        dp,
        fleet,
        sample_s,
        duration,
        clean,
        elec_clean,
        pauses=ex.pauses,
        ramp=ex.ramp,
        decoys=decoys,
        params={
            "gpu": fleet.kind.name,
            "k": dp.k,
            "c0_s": dp.c0,
            "step_s": clean.S,
            "comm_exposed_s": clean.fixed,
            "link_gbps": float(dp.rate_gbps[0]),
            "grad_bytes": dp.grad_bytes,
            "wait": "spin" if wait_act == SPIN else "idle",
        },
    )
    if target is not None:
        w = weights or {"thermal": 1, "power_cap": 1, "slow_nic": 1, "slow_host": 1}

        def locate(kind: str) -> tuple[int, ...]:
            node = int(rng.integers(dp.nodes))
            if kind == "slow_nic":
                return node, int(node * dp.rails_n + rng.integers(dp.rails_n))
            return node, int(rng.integers(dp.gpn))

        def slowdown_of(kind: str, where: tuple[int, ...], x: float, mode: str) -> float:
            return fault_state(dp, fleet, kind, where, x, mode)[0].S / clean.S - 1

        choice = pick_fault(rng, target, w, locate, slowdown_of, nic_modes(rng))
        attach_fault(
            job,
            dp,
            fleet,
            choice,
            target,
            duration,
            ex.earliest_fault_s,
            localisable=not (choice.kind == "slow_host" and wait_act == IDLE),
        )
    return render(job)


def dp_job(
    family: str,
    seed: int,
    rng: np.random.Generator,
    dp: DP,
    fleet: Fleet,
    sample_s: float,
    duration: float,
    clean: StepPlan,
    elec_clean: Electrical,
    *,
    pauses: list[Pause] | None = None,
    ramp: tuple[float, float, float] | None = None,
    decoys: list[str] | None = None,
    params: dict[str, object] | None = None,
) -> Job:
    """A data-parallel job on its step model's nodes and ports, with its measurement drawn."""
    job = Job(
        family=family,
        seed=seed,
        rng=rng,
        nodes=dp.nodes,
        gpus_per_node=dp.gpn,
        sample_s=sample_s,
        duration_s=duration,
        fleet=fleet,
        port_node=dp.port_node,
        port_gpu=dp.port_gpu,
        rate_gbps=dp.rate_gbps,
        clean=clean,
        elec_clean=elec_clean,
        pauses=pauses if pauses is not None else [],
        ramp=ramp,
        decoys=decoys if decoys is not None else [],
        params=params if params is not None else {},
    )
    draw_measurement(job)
    return job


def attach_any_fault(
    job: Job,
    model: Any,
    fleet: Fleet,
    target: float,
    duration: float,
    clean_step_s: float,
    fault_state: Callable[..., tuple[StepPlan, Electrical]],
    *,
    weights: dict[str, float] | None = None,
    pick_node: Callable[[], int] | None = None,
    localisable: Callable[[Choice], bool] | None = None,
) -> Choice:
    """A fault of any kind in `weights` (default: the four rank faults, equally likely) on a random GPU,
    node (`pick_node`, default any) or port of a model with one port per node (`nodes`, `gpn`): the choice
    families other than plain data parallel make the same way."""
    rng = job.rng

    def locate(kind: str) -> tuple[int, ...]:
        node = pick_node() if pick_node is not None else int(rng.integers(model.nodes))
        return (node, node) if kind == "slow_nic" else (node, int(rng.integers(model.gpn)))

    def slowdown_of(kind: str, where: tuple[int, ...], x: float, mode: str) -> float:
        return fault_state(model, fleet, kind, where, x, mode)[0].S / clean_step_s - 1

    w = weights or {"thermal": 1.0, "power_cap": 1.0, "slow_nic": 1.0, "slow_host": 1.0}
    choice = pick_fault(rng, target, w, locate, slowdown_of, nic_modes(rng))
    ok = localisable(choice) if localisable is not None else True
    attach_fault(job, model, fleet, choice, target, duration, 600.0, localisable=ok, fault_state=fault_state)
    return choice


def attach_fault(
    job: Job,
    dp: Any,
    fleet: Fleet,
    choice: Choice,
    target: float,
    duration: float,
    earliest: float,
    localisable: bool = True,
    fault_state: Callable[..., tuple[StepPlan, Electrical]] | None = None,
) -> None:
    """Put the chosen fault on the job: its fault-state step, electrical state and ground truth. `dp` is
    any step model with gpn and rate_gbps (per port); `fault_state` its function (default: data parallel)."""
    rng = job.rng
    state = fault_state or globals()["fault_state"]
    faulty, elec = state(dp, fleet, choice.kind, choice.where, choice.x, choice.mode)
    window = draw_window(rng, duration, earliest)
    detail = elec.detail
    if choice.kind == "slow_nic":
        rate = dp.rate_gbps[choice.where[1]]
        if choice.mode == "downtrained":
            detail = f"link trained at {rate * choice.x:.0f} Gb/s instead of {rate:.0f}"
        else:
            detail = f"congested port, {1 - choice.x * 0.9:.0%} of its throughput"
    elif choice.kind == "slow_host":
        detail = "host starves its GPUs between steps (input pipeline, CPU contention)"
    job.faulty, job.elec_fault = faulty, elec
    job.fault = record(rng, choice, dp.gpn, elec, window, target, detail, localisable)


def _init(rng: np.random.Generator, ranks: int) -> Pause:
    """A job already past its start: a short init (processes, NCCL rendezvous) before the first step."""
    del ranks
    return Pause(0.0, float(rng.uniform(20, 90)), mix(deep_idle=0.8, light=0.2), grain=5.0, name="init")
