"""Who is to blame in one job, and for how long: the straggler detector's judgement (stragglers/detector.py
explains it), once the job's signals are up to date with a sample interval.

It reads the signals through `JobSignals` and keeps only what judging needs of its own (the candidate,
the active straggler and its estimates), so the same judgement serves one job's detector and a row of
many jobs' detectors advanced together (stragglers/batch.py)."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

import numpy as np

from gpuscope.stragglers.events import Straggler, StragglerEvent
from gpuscope.stragglers.signal import finite_median as _median

if TYPE_CHECKING:  # the detector builds its judge: no import back at run time
    from gpuscope.stragglers.detector import Settings


class Normals(Protocol):
    """What the judge reads of a signal (stragglers/signal.py): per element, now and its normal."""

    @property
    def now(self) -> np.ndarray: ...

    @property
    def base(self) -> np.ndarray: ...

    @property
    def spread(self) -> np.ndarray: ...


@dataclass(frozen=True)
class JobSignals:
    """A job's signals as the detector keeps them (stragglers/detector.py names each), and when each rank's
    clock was last held down for a named reason."""

    level: Normals
    traffic: Normals
    share: Normals
    util: Normals
    wait: Normals
    link: Normals
    busy: Normals
    power: Normals
    nvlink: Normals
    clock: Normals
    thermal_at: np.ndarray
    power_cap_at: np.ndarray


@dataclass
class Candidate:
    key: tuple[int, int | None, int | None, str]  # (node, gpu, port, cause)
    since_s: float
    evidence: dict[str, float]


class Judge:
    def __init__(self, settings: Settings, node_of: np.ndarray, port_node: np.ndarray) -> None:
        self.settings = settings
        self.node_of, self.port_node = node_of, port_node
        nodes = int(node_of.max()) + 1 if node_of.size else 0
        self._first_rank = np.array([int(np.argmax(node_of == n)) for n in range(nodes)])
        self._candidate: Candidate | None = None
        self._quiet_since: float | None = None
        self.active: Straggler | None = None  # as last reported
        # The active straggler's job slowdown per sample: the last 720 (an hour at 5 s), so a long one stays cheap.
        self._estimates: deque[float] = deque(maxlen=720)

    @property
    def has_candidate(self) -> bool:
        return self._candidate is not None

    def pause(self) -> None:
        """A phase of the whole job: a candidate must hold through running time, not across a pause."""
        self._candidate = None

    def step(
        self, t: float, signals: JobSignals, clock: np.ndarray, link_gbps: np.ndarray, synchronous: bool
    ) -> tuple[StragglerEvent, ...]:
        """One judged sample interval (past warm-up, not paused or settling), the signals updated with it;
        what changed. Where nobody waits for anybody (independent replicas) there is no straggler to find."""
        return self._judge(t, self._find(t, signals, clock, link_gbps) if synchronous else None)

    def _find(self, t: float, signals: JobSignals, clock: np.ndarray, link_gbps: np.ndarray) -> Candidate | None:
        """The most likely culprit now, if the job is slower than its normal."""
        s = self.settings
        slowdown = float(signals.level.base[0] / signals.level.now[0] - 1)
        if not slowdown >= s.min_job_slowdown:
            return None
        evidence = {"job_slowdown": slowdown}
        noise = float(signals.traffic.spread[0])
        if signals.traffic.base[0] >= s.min_traffic_bps and noise <= s.max_traffic_noise:
            # The second route to the same slowdown: a training step sends the same bytes however long
            # it takes, so a job k times slower sends k times fewer bytes per second. Activity that
            # falls while traffic rises (an asynchronous checkpoint's writes) or traffic that stops
            # (evaluation, a checkpoint, a stall every rank takes) is a phase of the job, not a straggler.
            # Only where traffic is steady: a job that syncs once in several samples (gradient
            # accumulation) sends in bursts that no short average tells apart from a phase.
            traffic = float(signals.traffic.base[0] / signals.traffic.now[0] - 1)
            evidence["traffic_slowdown"] = traffic
            if not _agree(slowdown, traffic, s.traffic_slack + 3 * noise):
                return None
        # A GPU over its share of the work while its clock is held down for a named reason: a throttled
        # GPU's tensor activity (cycles over elapsed cycles) rises with the time it computes.
        # A GPU that was not working in its normal (a node drained, rejoining) is nobody's straggler.
        share_rise = _rise(signals.share, s.min_working_share)
        rank = _argmax(share_rise)
        cause = "gpu_degraded"
        if rank >= 0 and share_rise[rank] >= s.min_share_rise and _stands_out(share_rise, rank):
            cause = self._clock_cause(t, signals, rank)
        if cause != "gpu_degraded":
            return self._gpu_candidate(rank, cause, share_rise, clock, evidence)
        # A degraded NVLink slows its GPU's share of every all-reduce inside the node, so the whole node
        # and then the job wait, while its GPUs look alike: its error counters name it.
        errors, usual = signals.nvlink.now, np.nan_to_num(signals.nvlink.base)  # never learnt: none usually
        link_rank = _argmax(errors / np.maximum(usual, s.min_nvlink_errors / s.nvlink_error_rise))
        if (
            link_rank >= 0
            and errors[link_rank] >= max(s.min_nvlink_errors, s.nvlink_error_rise * usual[link_rank])
            and _stands_out(errors, link_rank)
        ):
            evidence["nvlink_errors_per_s"] = float(errors[link_rank])
            return self._gpu_candidate(link_rank, "nvlink", share_rise, clock, evidence)
        # A link trained to a lower rate names its own port; transmit waits can show on the port that
        # sends into the slow one (credit back-pressure), so they come second.
        link_drop = 1 - signals.link.now / signals.link.base
        port = _argmax(link_drop)
        if port >= 0 and link_drop[port] >= s.min_link_drop and _stands_out(link_drop, port):
            evidence |= {"link_drop": float(link_drop[port]), "link_gbps": float(link_gbps[port])}
            return self._nic_candidate(port, evidence)
        # Waits name a port only when its peers are quiet: a slow port starves the others of data, not
        # of credits. Waits risen on many ports at once are the fabric's, or another job's on the same
        # switches: no rank inside this job is to blame. In a job with two ports, both waiting is as
        # likely one slow peer (a hot expert, a slow NIC) as the fabric: nothing is said.
        wait_rise = signals.wait.now / np.maximum(signals.wait.base, 1.0)
        port = _argmax(wait_rise)
        peers_quiet = port >= 0 and not _median(np.delete(wait_rise, port)) >= s.min_wait_rise / 2
        if port >= 0 and wait_rise[port] >= s.min_wait_rise and _stands_out(wait_rise, port) and peers_quiet:
            evidence |= {"xmit_wait_ratio": float(wait_rise[port]), "link_gbps": float(link_gbps[port])}
            return self._nic_candidate(port, evidence)
        # A starved host's GPUs idle between steps; a node whose GPUs stopped working altogether has left
        # the job (drained, an elastic restart without it), and the others do not wait for it.
        util_drop = np.where(signals.util.now >= s.min_working_share, signals.util.base - signals.util.now, np.nan)
        node = _argmax(util_drop)
        if node >= 0 and util_drop[node] >= s.min_util_drop and _stands_out(util_drop, node):
            evidence |= {"util_drop": float(util_drop[node])}
            return Candidate((node, None, None, "slow_host"), 0.0, evidence)
        # The fabric's only where the job's own bytes per second fell with its steps (a congested path
        # carries a step's bytes more slowly): waits on every port while the job sends more are its own
        # writes to storage (a checkpoint), and where traffic is unsteady nothing tells them apart.
        congested = int(np.sum(wait_rise >= s.min_wait_rise))
        throttled = evidence.get("traffic_slowdown", -math.inf) >= 0.5 * slowdown
        if congested >= max(s.min_congested_ports, wait_rise.size / 2) and throttled:
            evidence |= {"ports_congested": float(congested), "ports_wait_ratio": _median(wait_rise)}
            return Candidate((-1, None, None, "fabric"), 0.0, evidence)
        # Last, a GPU over its share at normal clocks: busy (SM activity) or working longer while the
        # others wait for it, and doing the same work slower rather than more work.
        rise = np.fmax(share_rise, _rise(signals.busy, s.min_working_share))
        rank = _argmax(rise)
        if rank < 0 or not rise[rank] >= s.min_share_rise or not _stands_out(rise, rank):
            return None
        if self._slower_not_busier(signals, rank, share_rise[rank], rise[rank], evidence):
            return self._gpu_candidate(rank, "gpu_degraded", rise, clock, evidence)
        return None

    def _slower_not_busier(
        self, signals: JobSignals, rank: int, work_rise: float, busy_rise: float, evidence: dict[str, float]
    ) -> bool:
        """Whether a GPU over its share at normal clocks does the same work slower (degraded: memory or
        link stalls) rather than more work (a hot expert, a heavier stage, a changed split): only the
        first makes the others wait for a fault. Busy for longer with its work share risen less is
        stalls; its share of the job's power risen with its share of the work is more work (energy
        follows work done, while the same work spread over a longer step draws no more than the peers'
        draw); neither known: degraded."""
        s = self.settings
        if busy_rise >= s.min_share_rise and not work_rise >= s.stalled_work * busy_rise:
            evidence["busy_rise"] = busy_rise
            return True
        power_rise = float(signals.power.now[rank] / signals.power.base[rank] - 1)
        if math.isfinite(power_rise):
            evidence["power_rise"] = power_rise
            return not power_rise >= s.more_work_power * work_rise
        return True

    def _clock_cause(self, t: float, signals: JobSignals, rank: int) -> str:
        """thermal or power_cap where the clock was held down for that reason lately, and is below its own
        normal (a healthy GPU that always runs at its power cap shows the reason too, and given more work
        (a hot expert) is not slow); else gpu_degraded."""
        s = self.settings
        recent = t - s.fast_s
        if not signals.clock.now[rank] <= (1 - s.min_clock_drop) * signals.clock.base[rank]:
            return "gpu_degraded"
        if signals.thermal_at[rank] >= recent:
            return "thermal"
        if signals.power_cap_at[rank] >= recent:
            return "power_cap"
        return "gpu_degraded"

    def _nic_candidate(self, port: int, evidence: dict[str, float]) -> Candidate:
        return Candidate((int(self.port_node[port]), None, port, "slow_nic"), 0.0, evidence)

    def _gpu_candidate(
        self, rank: int, cause: str, share_rise: np.ndarray, clock: np.ndarray, evidence: dict[str, float]
    ) -> Candidate:
        evidence |= {"share_rise": float(share_rise[rank])}
        clock_ratio = clock[rank] / _median(np.delete(clock, rank))
        if math.isfinite(clock_ratio):  # the culprit's sample can be missing while it is judged on its average
            evidence["clock_ratio"] = float(clock_ratio)
        node = int(self.node_of[rank])
        return Candidate((node, rank - int(self._first_rank[node]), None, cause), 0.0, evidence)

    def _judge(self, t: float, found: Candidate | None) -> tuple[StragglerEvent, ...]:
        """Persistence: declare a candidate that held persist_s; end a straggler gone for persist_s. Three
        samples at the least, wherever samples are sparse: a stall every rank takes for a few seconds
        can straddle two of them."""
        s = self.settings
        persist_s = max(s.persist_s, 2 * s.sample_s)
        if found is not None and found.key[3] == "fabric" and self.active is None:
            persist_s = max(persist_s, s.fabric_persist_s)
        if self.active is not None:
            active = self.active
            if found is not None and found.key[:3] == (active.node, active.gpu, active.port):
                self._quiet_since = None
                self._estimates.append(found.evidence["job_slowdown"])
                slowdown = float(np.median(self._estimates))
                if slowdown == active.slowdown:
                    return ()
                self.active = replace(active, slowdown=slowdown)
                return (StragglerEvent("updated", self.active),)
            if self._quiet_since is None:
                self._quiet_since = t
            elif t - self._quiet_since >= persist_s:
                ended = replace(active, ended_s=self._quiet_since)
                self.active, self._quiet_since = None, None
                return (StragglerEvent("ended", ended),)
            return ()
        if found is None or self._candidate is None or self._candidate.key != found.key:
            self._candidate = None if found is None else Candidate(found.key, t, found.evidence)
            return ()
        if t - self._candidate.since_s < persist_s:
            return ()
        node, gpu, port, cause = found.key
        slowdown = found.evidence["job_slowdown"]
        self.active = Straggler(node, gpu, port, cause, self._candidate.since_s, slowdown, t, found.evidence)
        self._estimates = deque([slowdown], maxlen=self._estimates.maxlen)
        self._candidate = None
        return (StragglerEvent("declared", self.active),)


def _agree(slowdown: float, traffic: float, slack: float) -> bool:
    """Whether the traffic route does not contradict the activity route. Traffic sampled faster than
    steps is bursty (a few all-reduces per average), so this is a veto on gross disagreement only:
    traffic up while activity is down, or traffic stopped while activity merely fell."""
    ratio = (1 + traffic) / (1 + slowdown)
    return 1 - max(slack, 0.75 * slowdown) <= ratio <= 1 + max(2 * slack, slowdown)


def _rise(signal: Normals, floor: float) -> np.ndarray:
    """How far each element is above its normal (now / normal - 1); NaN where the normal is below `floor`."""
    with np.errstate(all="ignore"):
        return np.where(signal.base >= floor, signal.now / signal.base - 1, np.nan)


def _argmax(values: np.ndarray) -> int:
    return int(np.nanargmax(values)) if np.isfinite(values).any() else -1


def _stands_out(values: np.ndarray, index: int, z: float = 3.5) -> bool:
    """Robust z-score of one element against the others (Iglewicz and Hoaglin: |z| > 3.5)."""
    others = np.delete(values, index)
    others = others[np.isfinite(others)]
    if others.size < 2:
        return True
    median = float(np.median(others))
    mad = float(np.median(np.abs(others - median)))
    spread = max(mad, 1e-3 * max(abs(median), 1e-9), 0.005)
    return 0.6745 * (float(values[index]) - median) / spread > z
