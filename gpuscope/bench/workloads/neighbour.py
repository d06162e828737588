"""neighbour: a synchronous data-parallel job (the victim, whose telemetry the case is) sharing leaf
switches, and on some seeds nodes, with another job (the aggressor, named in params and ground truth).

Victim. Data parallel as in spin_dp (see _dp for the step): every step computes, then all-reduces its
gradients in a ring over one NIC per node; waiting ranks spin in NCCL. Its gradients are large enough
for the network to matter (communication 10-70% of compute), which is what makes a job feel its
neighbours.

Where the jobs meet, drawn per seed:
- switch (65%): the victim's nodes hang off leaf switches the aggressor also uses. Either the whole
  victim sits under the shared leaf (or the congestion is in the spine it crosses): every port alike;
  or a contiguous block of its nodes does: those ports only. The aggressor may start after the victim.
- node (35%): the victim holds 4 GPUs of each 8-GPU server, and on some of its nodes the aggressor holds
  the other 4 and sends through the same NIC. Those ports' counters carry both jobs' bytes (the port
  counts everything it transmits), so they read busier than the victim's own traffic, always; the
  aggressor's GPUs warm the chassis, so the victim's GPUs there run a few degrees hotter.

Physics of the network (credit-based flow control). The aggressor's traffic is harmless while the links
have headroom: a light phase only makes the victim's packets queue behind the aggressor's now and then,
so the victim's ports accrue some xmit_wait during its transfers and the ring barely notices (about 1%
at most, kept in the clean step time). A heavy phase (a large all-to-all, or a checkpoint streaming to storage)
saturates the shared links and fills the switch buffers; congestion spreads back to every sender behind
them and the victim's flows get a share e of their bandwidth. The ring moves at the pace of its most
congested hop, so every victim rank spends longer in the all-reduce (all alike: no rank inside the victim
is at fault), the step slows, every port's bytes/s fall together (the same bytes per step over a longer
step), and the congested ports wait for credits B (1/(e rate) - 1/rate) per step. On shared nodes the
aggressor's own bytes fill the NIC (the port's bytes/s barely drop, or rise) and its packets wait for
credits too, for the whole sample rather than only during the victim's transfers.

Seeds (per _common.design): clean seeds carry 1-4 light episodes. Half the faulty seeds of every block
of 16 are the neighbour's doing: one heavy episode, the `fabric` ground truth (node -1, no GPU, no port,
`aggressor` named), its intensity calibrated to the target slowdown, plus light episodes elsewhere. The
other half are a real rank fault inside the victim (thermal, power_cap, slow_nic, slow_host, as in
spin_dp), half of them overlapping a light neighbour episode.
Decoys: light neighbour traffic, an aggressor on a shared NIC (steady extra bytes and waits on its
ports), warmer shared nodes, a slow die, a hot slot, a port under an oversubscribed uplink, healthy GPUs
at their power limit, an exporter outage.
"""

from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass

import numpy as np

from gpuscope.bench.workloads import Case
from gpuscope.bench.workloads._common import (
    BLOCK,
    design,
    draw_duration,
    draw_window,
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
    fault_state,
    ring_dp,
    step,
)
from gpuscope.bench.workloads._engine import Fault, Pause, StepPlan, calibrate, onehot, render
from gpuscope.bench.workloads._gpu import COMPUTE, SPIN, XFER, Electrical, Fleet, draw_fleet, electrical
from gpuscope.bench.workloads._held_out import scrape_interval

FAMILY = "neighbour"
MIN_SHARE = 0.03  # the least bandwidth share a heavy phase leaves the victim on its worst port


def is_fabric(seed: int) -> bool:
    """Half the faulty seeds of each block of 16 are the neighbour's doing, chosen per block at random."""
    block = seed // BLOCK
    faulty = [s for s in range(block * BLOCK, (block + 1) * BLOCK) if design(FAMILY, s) is not None]
    order = np.random.default_rng([zlib.crc32(FAMILY.encode()), 4711, block]).permutation(len(faulty))
    return seed in {faulty[int(i)] for i in order[: len(faulty) // 2]}


@dataclass
class Layout:
    aggressor: str
    shared_nic: bool  # the aggressor has GPUs on some victim nodes and sends through their NIC
    congested: np.ndarray  # (P,) ports whose traffic crosses the shared switch
    severity: np.ndarray  # (P,) share of a heavy phase's effect each port sees (0 where not congested)
    shared: np.ndarray  # (P,) ports that also carry the aggressor's traffic
    start_s: float  # when the aggressor started (0: before the victim)


@dataclass
class Episode:
    start: float
    end: float
    heavy: bool
    phase: str
    level: float  # heavy: bandwidth share left on the worst port; light: credit wait per second of transmit


def _draw_victim(rng: np.random.Generator, gpn: int) -> tuple[DP, Fleet, list[str]]:
    nodes = log_uniform_int(rng, 2, 48)
    fleet = draw_fleet(rng, nodes, gpn)
    decoys = fleet_decoys(rng, fleet)
    ring = draw_ring(rng, nodes, gpn, False, (0.25, 3.0), rho_range=(0.1, 0.7))  # the network matters
    decoys += noisy_port(rng, ring.wait_base, 0.2)
    dp = ring_dp(rng, ring, nodes, gpn, k=int(rng.integers(1, 3)), wait_act=SPIN, rails=False, beta_max=0.5)
    return dp, fleet, decoys


def _draw_layout(rng: np.random.Generator, nodes: int, shared_nic: bool, duration: float) -> Layout:
    name = f"job-{int(rng.integers(1000, 99999))}"
    shared = np.zeros(nodes, dtype=bool)
    start = 0.0
    if shared_nic:
        shared[rng.choice(nodes, int(rng.integers(1, max(1, nodes // 2) + 1)), replace=False)] = True
        congested = shared.copy() if rng.random() < 0.5 else np.ones(nodes, dtype=bool)
        severity = np.where(shared, 1.0, rng.uniform(0.6, 1.0, nodes))
    else:
        if nodes < 3 or rng.random() < 0.6:  # all under the shared leaf, or behind the congested spine
            congested = np.ones(nodes, dtype=bool)
            severity = rng.uniform(0.95, 1.0, nodes)
        else:  # a contiguous block of the victim's nodes under the shared leaf
            size = int(rng.integers(1, nodes))
            first = int(rng.integers(0, nodes - size + 1))
            congested = np.zeros(nodes, dtype=bool)
            congested[first : first + size] = True
            severity = rng.uniform(0.6, 1.0, nodes)
        if rng.random() < 0.4:
            start = float(rng.uniform(0.0, duration / 2))
    severity = np.where(congested, severity, 0.0)
    severity[congested] /= severity.max()  # the worst port sees the phase's full effect
    return Layout(name, shared_nic, congested, severity, shared, start)


def _congested_step(dp: DP, elec: Electrical, fleet: Fleet, eff: np.ndarray) -> StepPlan:
    """The victim's step with port p keeping a share eff[p] of its bandwidth: the ring at the pace of the
    worst port; each congested port waits for credits for the rest of its stretched transmit time."""
    p = step(dp, elec, fleet, port_eff=eff)
    rate = dp.rate_gbps * 1e9 / 8
    wait = p.port_wait.copy()
    wait[0] += dp.bytes_per_port() * (1 / (rate * eff) - 1 / rate)
    return dataclasses.replace(p, port_wait=wait)


def _eff(lay: Layout, x: float) -> np.ndarray:
    return 1.0 - (1.0 - MIN_SHARE) * x * lay.severity


def _free(
    rng: np.random.Generator, busy: list[tuple[float, float]], lo: float, hi: float, length: float
) -> float | None:
    """A start in [lo, hi - length] whose span keeps two minutes from every busy one, or None."""
    for _ in range(20):
        if hi - length <= lo:
            return None
        t = float(rng.uniform(lo, hi - length))
        if all(t + length + 120 < a or t > b + 120 for a, b in busy):
            return t
    return None


def _light(rng: np.random.Generator, ep: Episode, dp: DP, lay: Layout, clean: StepPlan) -> Pause:
    """A light phase: the victim's packets queue behind the aggressor's during its transfers; on a
    shared NIC the aggressor's own bytes and waits too. The ring barely notices (in the clean step)."""
    rate = dp.rate_gbps * 1e9 / 8
    transmit_per_s = dp.bytes_per_port() / rate / clean.S
    wait = lay.severity * ep.level * transmit_per_s
    sent = np.zeros(dp.nodes)
    if lay.shared_nic:
        sent = lay.shared * rate * rng.uniform(0.1, 0.35)
        wait = wait + lay.shared * rng.uniform(0.01, 0.06)
    return Pause(
        ep.start,
        ep.end,
        onehot(XFER),
        name="light neighbour traffic",
        stall=True,
        share=0.02 * ep.level * clean.fixed / clean.S,
        port_bytes_s=sent,
        port_wait_s=wait,
    )


def _aggressor_on_nic(rng: np.random.Generator, dp: DP, lay: Layout, start: float, end: float, load: float) -> Pause:
    """The aggressor's bytes and credit waits on the NICs it shares, whatever the victim does."""
    rate = dp.rate_gbps * 1e9 / 8
    return Pause(
        start,
        end,
        onehot(XFER),
        name="aggressor traffic",
        stall=True,
        share=0.0,
        port_bytes_s=lay.shared * rate * load * rng.uniform(0.9, 1.0, dp.nodes),
        port_wait_s=lay.shared * load * rng.uniform(0.02, 0.5),
    )


def generate(seed: int) -> Case:
    rng = rng_for(FAMILY, seed)
    target = design(FAMILY, seed)
    shared_nic = bool(rng.random() < 0.35)
    dp, fleet, decoys = _draw_victim(rng, 4 if shared_nic else (8 if rng.random() < 0.85 else 4))
    duration = draw_duration(rng)
    lay = _draw_layout(rng, dp.nodes, shared_nic, duration)
    sample_s = scrape_interval(rng, dp.ranks, duration)
    if shared_nic:
        fleet.t_inlet[np.repeat(lay.shared, dp.gpn)] += rng.uniform(1.0, 4.0)
        decoys += ["aggressor_shares_nic", "warmer_shared_nodes"]
    elec = electrical(fleet)
    clean = step(dp, elec, fleet)
    if np.any(elec.bits_act[COMPUTE] & 0x4):
        decoys.append("power_capped_healthy_gpus")
    init = _init(rng, dp.ranks)
    pauses: list[Pause] = [init]
    if shared_nic:
        pauses.append(_aggressor_on_nic(rng, dp, lay, 0.0, duration, float(rng.uniform(0.02, 0.08))))
    job = dp_job(FAMILY, seed, rng, dp, fleet, sample_s, duration, clean, elec)
    episodes: list[Episode] = []
    fabric = target is not None and is_fabric(seed)
    if fabric and target is not None:
        x = calibrate(lambda v: _congested_step(dp, elec, fleet, _eff(lay, v)).S / clean.S - 1, target)
        eff = _eff(lay, x)
        onset, end = draw_window(rng, duration, max(600.0, lay.start_s + 300.0))
        phase = str(rng.choice(["all-to-all", "checkpoint to storage"]))
        episodes.append(Episode(onset, end, True, phase, float(eff.min())))
        job.faulty, job.elec_fault = _congested_step(dp, elec, fleet, eff), elec
        job.fault = Fault(
            "fabric",
            -1,
            None,
            None,
            onset,
            end,
            target,
            detail=f"{lay.aggressor}'s {phase} congests the shared switch: the victim keeps {eff.min():.0%} "
            f"of its bandwidth on its worst port, {int(lay.congested.sum())} of {dp.nodes} ports congested",
        )
        if shared_nic:
            pauses.append(_aggressor_on_nic(rng, dp, lay, onset, end, 1.0 - float(eff.min())))
    elif target is not None:
        attach_any_fault(job, dp, fleet, target, duration, clean.S, fault_state)
        assert job.fault is not None
        if rng.random() < 0.5:  # a light neighbour episode over the fault: two things at once
            f0, f1 = job.fault.onset_s, job.fault.end_s
            a = float(np.clip(f0 + rng.uniform(-0.5, 0.8) * (f1 - f0), max(lay.start_s, init.end), duration - 300))
            episodes.append(Episode(a, min(a + float(rng.uniform(180, 1200)), duration - 60), False, "light", 0.0))

    n_light = int(rng.integers(1, 5)) if target is None else int(rng.integers(0, 3))
    lo = max(init.end + 60.0, lay.start_s)
    for _ in range(n_light):
        length = float(rng.uniform(180, 1500))
        start = _free(rng, [(e.start, e.end) for e in episodes], lo, duration - 60, length)
        if start is not None:
            episodes.append(Episode(start, start + length, False, "light", 0.0))
    for ep in episodes:
        if not ep.heavy:
            ep.phase = str(rng.choice(["all-reduce", "data loading", "small all-to-all", "evaluation traffic"]))
            ep.level = float(rng.uniform(0.05, 0.6))
            pauses.append(_light(rng, ep, dp, lay, clean))
    if any(not e.heavy for e in episodes):
        decoys.append("light_neighbour_traffic")
    job.pauses = pauses
    job.decoys = decoys
    job.params = {
        "gpu": fleet.kind.name,
        "k": dp.k,
        "step_s": clean.S,
        "comm_exposed_s": clean.fixed,
        "link_gbps": float(dp.rate_gbps[0]),
        "grad_bytes": dp.grad_bytes,
        "wait": "spin",
        "aggressor": lay.aggressor,
        "aggressor_start_s": lay.start_s,
        "layout": "node" if shared_nic else "switch",
        "shared_nodes": np.flatnonzero(lay.shared).tolist(),
        "congested_ports": np.flatnonzero(lay.congested).tolist(),
        "episodes": [(e.start, e.end, "heavy" if e.heavy else "light", e.phase, e.level) for e in episodes],
    }
    case = render(job)
    if fabric:
        case.faults = [dataclasses.replace(gt, aggressor=lay.aggressor) for gt in case.faults]
    return case
