"""Straggler detection in one running job, from telemetry alone, one sample interval at a time.

Utilisation cannot find a straggler (ranks waiting in NCCL read ~100%), so the detector watches what
waiting changes: each GPU's tensor activity relative to the job's (its "share of the work"), the job's
median activity against its own past (how much slower the whole job got), the bytes the job sends per
second (a second route to the same slowdown), each node's GPU utilisation (idle outside kernels: a
stalled host), and each InfiniBand port's transmit waits and link rate.
Each update takes one sample interval's readings by name (stragglers/readings.py) and returns what
changed (stragglers/events.py): a straggler declared, its estimate updated, its end.

- Peers and past: every ratio is compared with the same rank's (node's, port's) own normal, so a
  permanently heavier role (the last pipeline stage) is its normal, not a straggler.
- Every normal is the median of 30 s means over the last `window_s` of healthy running, not a long
  average from the first sample: a job that starts slowly (compilation, data loading, warm-up) would
  otherwise leave its normals far from its steady state, so that a real slowdown reads as none. Means
  first, because the current estimate is a mean: single samples shorter than a step are skewed, and
  their median is not their mean's. The median shrugs off the first minute of a fault before it is
  declared. The slowdown reported is the median of the estimates while active.
- Only synchronous work is judged (stragglers/synchrony.py): where the job's parts do not keep their
  shares (independent replicas), nobody waits for anybody and nothing is declared.
- Evidence is weighed most specific first: a GPU doing more than its share while its clock is held
  down for a named reason (thermal, power cap), a GPU whose NVLink errors climbed, a port whose link
  trained down, a port whose waits rose while its peers' did not, a starved host, waits on many ports
  while the job's bytes fall with its steps (the fabric, or another job: a finding about the whole
  job, node -1), and last a GPU over its share at normal clocks that does the same work slower (busy
  longer, its share of the power not risen with its share of the work: `gpu_degraded`); one doing
  more work at normal clocks (a hot expert) is not blamed.
- Phases all ranks go through together (checkpoints, evaluation, loader stalls, start-up) are gated out
  on the job's fast average, with a hold-off while it climbs back; traffic that contradicts the
  activity (up while activity is down, or stopped) marks a phase too. Nothing is declared in warm-up.
- Verification: a candidate is declared only while the job itself is measurably slower, and only after
  it persisted; normals stand still while a straggler is active so a long one does not become normal.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace

import numpy as np

from gpuscope.stragglers.events import Straggler, StragglerEvent
from gpuscope.stragglers.readings import Readings
from gpuscope.stragglers.signal import Signal
from gpuscope.stragglers.synchrony import Synchrony

HW_THERMAL_SLOWDOWN = 0x40  # NVML clock event reason bits
SW_THERMAL_SLOWDOWN = 0x20
SW_POWER_CAP = 0x4


@dataclass(frozen=True)
class Settings:
    sample_s: float = 5.0
    fast_s: float = 20.0  # time constant of the current estimate
    window_s: float = 600.0  # every normal is the median over this much healthy past
    block_s: float = 30.0  # ... of means over blocks this long, so it is the mean's normal, not a sample's
    max_freeze_s: float = 2400.0  # normals stand still for an active straggler this long at most
    warmup_s: float = 600.0  # learning only after a job starts: a full window, as GPUs settle thermally
    persist_s: float = 30.0  # a candidate must hold this long to be declared, and be gone this long to end
    min_share_rise: float = 0.05  # a rank's share of the work above its own normal by this much
    min_job_slowdown: float = 0.03  # and the job measurably slower: the verification step
    min_util_drop: float = 0.06  # a node's GPUs idle outside kernels by this much more than their peers
    min_wait_rise: float = 4.0  # a port's transmit waits this many times its normal
    min_link_drop: float = 0.1  # or its link running this much below its normal rate (trained down)
    gate_activity: float = 5.0  # the job's tensor activity (%, fast average) below this: a pause, skipped
    pause_fraction: float = 0.3  # ... or below this fraction of its normal (a job 3.3x slower)
    after_pause_s: float = 80.0  # four fast time constants: the averages within 2% of running again
    min_traffic_bps: float = 1e6  # the job sends at least this much per port: traffic is a second route
    traffic_slack: float = 0.15  # ... whose slowdown must not contradict the activity's by more than this
    max_traffic_noise: float = 0.1  # ... where its 30 s means vary (relative deviation) by this much at most
    stalled_work: float = 0.5  # a GPU busy longer whose work share rose less than this part of it: stalls
    more_work_power: float = 0.3  # a GPU whose power rose by this part of its work share's rise does more work
    min_congested_ports: int = 3  # waits risen on this many ports, and on half of them at least: the fabric's
    fabric_persist_s: float = 120.0  # ... declared after this long: a job's own checkpoint writes last less
    min_clock_drop: float = 0.03  # a named clock reason blames a GPU whose clock fell this much below its normal
    # A GPU below this share of the job's work in its normal (a node's GPUs below this share of their peers'
    # utilisation now) is not doing the job's work (drained, rejoining): nobody waits for it.
    min_working_share: float = 0.2
    min_nvlink_errors: float = 1.0  # NVLink replays, recoveries and CRC errors per second that name a link...
    nvlink_error_rise: float = 10.0  # ... at this many times the GPU's own normal


@dataclass
class _Candidate:
    key: tuple[int, int | None, int | None, str]  # (node, gpu, port, cause)
    since_s: float
    evidence: dict[str, float]


class JobDetector:
    def __init__(self, nodes: int, gpus_per_node: int, settings: Settings | None = None) -> None:
        self.__init_ranks(np.arange(nodes * gpus_per_node) // gpus_per_node, None, settings)

    @classmethod
    def for_ranks(
        cls, node_of: np.ndarray, settings: Settings | None = None, port_node: np.ndarray | None = None
    ) -> JobDetector:
        """A job whose ranks sit on nodes 0..n-1 as `node_of` says (any number of GPUs per node), with
        InfiniBand ports on nodes as `port_node` says (default: one per node, in node order)."""
        detector = cls.__new__(cls)
        detector.__init_ranks(np.asarray(node_of), port_node, settings)
        return detector

    def __init_ranks(self, node_of: np.ndarray, port_node: np.ndarray | None, settings: Settings | None) -> None:
        self.settings = s = settings or Settings()
        self.node_of = node_of
        self.nodes = int(node_of.max()) + 1 if node_of.size else 0
        self.port_node = np.arange(self.nodes) if port_node is None else np.asarray(port_node)
        self._first_rank = np.array([int(np.argmax(node_of == n)) for n in range(self.nodes)])
        fast = 1 - math.exp(-s.sample_s / s.fast_s)
        block = max(1, round(s.block_s / s.sample_s))
        blocks = max(3, round(s.window_s / (block * s.sample_s)))
        self._started: float | None = None
        self._share = Signal(fast, blocks, block)  # rank's tensor activity / job median
        self._util = Signal(fast, blocks, block)  # node's median GPU utilisation / the other nodes'
        self._level = Signal(fast, blocks, block)  # job median tensor activity
        self._traffic = Signal(fast, blocks, block, spread=True)  # job's bytes per second sent, per port
        self._wait = Signal(fast, blocks, block)  # port's transmit waits per second
        self._link = Signal(fast, blocks, block)  # port's link rate
        self._busy = Signal(fast, blocks, block)  # rank's SM activity / job median, where activity is tensor
        self._clock = Signal(fast, blocks, block)  # rank's SM clock (MHz)
        self._power = Signal(fast, blocks, block)  # rank's power draw / job median
        self._nvlink = Signal(fast, blocks, block)  # rank's NVLink errors per second (replay, recovery, CRC)
        self._synchrony = Synchrony.for_job(node_of, blocks, block)
        # When each rank last had a clock held down for a named reason: a capped GPU shows its bit only
        # while it computes, so a sample that falls in a collective would otherwise lose the cause.
        self._thermal_at = np.full(node_of.size, -math.inf)
        self._power_cap_at = np.full(node_of.size, -math.inf)
        self._paused_at = -math.inf
        self._candidate: _Candidate | None = None
        self._quiet_since: float | None = None
        self.active: Straggler | None = None  # as last reported
        # The active straggler's job slowdown per sample: the last 720 (an hour at 5 s), so a long one stays cheap.
        self._estimates: deque[float] = deque(maxlen=720)

    def update(self, readings: Readings) -> tuple[StragglerEvent, ...]:
        """One sample interval, in time order; what changed to the job's stragglers with it (mostly nothing)."""
        if (readings.gpus, readings.ports) != (self.node_of.size, self.port_node.size):
            raise ValueError(
                f"readings of {readings.gpus} GPUs and {readings.ports} ports for a job of"
                f" {self.node_of.size} GPUs and {self.port_node.size} ports"
            )
        s = self.settings
        t, tensor, util, clock = readings.t_s, readings.work, readings.util_pct, readings.sm_clock_mhz
        xmit_bytes_rate, link_gbps = readings.xmit_bytes_per_s, readings.link_gbps
        missing = np.full(tensor.shape, np.nan)  # what a feed without the counter reads
        sm = missing if readings.sm_active_pct is None else readings.sm_active_pct
        power = missing if readings.power_w is None else readings.power_w
        nvlink_errors = missing if readings.nvlink_errors_per_s is None else readings.nvlink_errors_per_s
        level = _median(tensor)
        self._level.observe(np.array([level]))
        if self._paused():
            self._candidate = None  # a candidate must hold through running time, not across a pause
            self._paused_at = t
            return ()  # neither evidence nor normal
        # The fast averages climb back for a while after a pause: neither judged nor learnt meanwhile.
        settling = t - self._paused_at < s.after_pause_s
        if self._started is None:
            self._started = t
        # Each node's utilisation against the other nodes' (not the job's, which a stalled node drags
        # down with it when it is half of a two-node job).
        per_node = np.array([_median(util[self.node_of == n]) for n in range(self.nodes)])
        others = np.array([_median(np.delete(per_node, n)) for n in range(self.nodes)]) if self.nodes > 1 else per_node
        with np.errstate(all="ignore"):
            node_util = per_node / others
        # The job's bytes per second: the median over its ports of one sample (its ports send together,
        # so they burst together), which a port shared with another job (a node split between two jobs
        # carries both through its NIC) does not move; averaged over time, not a median of samples.
        sent = (
            math.nan
            if xmit_bytes_rate is None or not np.isfinite(xmit_bytes_rate).any()
            else float(np.nanmedian(xmit_bytes_rate))
        )
        # The rank's activity against the smoothed level: means, as the normals are (a median of bursty
        # samples is not the median of their averages).
        signals = (
            (self._share, tensor / self._level.now[0]),
            (self._util, node_util),
            (self._traffic, np.array([sent])),
            (self._wait, readings.xmit_wait_per_s),
            (self._link, link_gbps),
            (self._busy, _ratio(sm, _median(sm))),
            (self._power, _ratio(power, _median(power))),
            (self._nvlink, nvlink_errors),
            (self._clock, clock),
        )
        for signal, values in signals:
            signal.observe(values)
        if settling:
            return ()
        # Normals stand still while a straggler is active, so a long one does not become normal; but
        # not for ever, or a wrong declaration (a job that settled slower after its start, say) would
        # keep itself alive by keeping the normal it is judged against.
        if self.active is None or t - self.active.started_s >= s.max_freeze_s:
            self._level.learn(np.array([level]))
            self._synchrony.learn(tensor)
            for signal, values in signals:
                signal.learn(values)
        if t - self._started < s.warmup_s:
            return ()
        bits = np.nan_to_num(readings.clock_event_reasons).astype(np.int64)
        self._thermal_at[(bits & (HW_THERMAL_SLOWDOWN | SW_THERMAL_SLOWDOWN)) != 0] = t
        self._power_cap_at[(bits & SW_POWER_CAP) != 0] = t
        # Where nobody waits for anybody (independent replicas) there is no straggler to find.
        return self._judge(t, self._find(t, clock, link_gbps) if self._synchrony.synchronous else None)

    @property
    def model(self) -> str:
        """How the job is judged: "synchronous" (its ranks wait for each other), "independent" (replicas
        that wait for nobody: not judged) or "undecided" (too little seen yet: nothing is judged in warm-up)."""
        return self._synchrony.model

    @property
    def wander(self) -> float:
        """The measure the model goes by (stragglers/synchrony.py); NaN until measured."""
        return self._synchrony.wander

    def _paused(self) -> bool:
        """A phase every rank goes through together (a checkpoint, evaluation, start-up, a loader stall):
        the job's activity (the fast average) collapses, or falls below a fraction of its normal that
        no straggler this side of a broken GPU causes. Judged on the average, not on single samples:
        a sample can fall wholly inside a collective, or inside the wait for a straggler (a job that
        syncs every 18 s), and skipping those would hide the very waits a straggler adds."""
        s = self.settings
        activity, normal = float(self._level.now[0]), float(self._level.base[0])
        floor = max(s.gate_activity, s.pause_fraction * normal) if math.isfinite(normal) else s.gate_activity
        return not activity >= floor

    def _find(self, t: float, clock: np.ndarray, link_gbps: np.ndarray) -> _Candidate | None:
        """The most likely culprit now, if the job is slower than its normal."""
        s = self.settings
        slowdown = float(self._level.base[0] / self._level.now[0] - 1)
        if not slowdown >= s.min_job_slowdown:
            return None
        evidence = {"job_slowdown": slowdown}
        noise = float(self._traffic.spread[0])
        if self._traffic.base[0] >= s.min_traffic_bps and noise <= s.max_traffic_noise:
            # The second route to the same slowdown: a training step sends the same bytes however long
            # it takes, so a job k times slower sends k times fewer bytes per second. Activity that
            # falls while traffic rises (an asynchronous checkpoint's writes) or traffic that stops
            # (evaluation, a checkpoint, a stall every rank takes) is a phase of the job, not a straggler.
            # Only where traffic is steady: a job that syncs once in several samples (gradient
            # accumulation) sends in bursts that no short average tells apart from a phase.
            traffic = float(self._traffic.base[0] / self._traffic.now[0] - 1)
            evidence["traffic_slowdown"] = traffic
            if not _agree(slowdown, traffic, s.traffic_slack + 3 * noise):
                return None
        # A GPU over its share of the work while its clock is held down for a named reason: a throttled
        # GPU's tensor activity (cycles over elapsed cycles) rises with the time it computes.
        # A GPU that was not working in its normal (a node drained, rejoining) is nobody's straggler.
        share_rise = _rise(self._share, s.min_working_share)
        rank = _argmax(share_rise)
        cause = "gpu_degraded"
        if rank >= 0 and share_rise[rank] >= s.min_share_rise and _stands_out(share_rise, rank):
            cause = self._clock_cause(t, rank)
        if cause != "gpu_degraded":
            return self._gpu_candidate(rank, cause, share_rise, clock, evidence)
        # A degraded NVLink slows its GPU's share of every all-reduce inside the node, so the whole node
        # and then the job wait, while its GPUs look alike: its error counters name it.
        errors, usual = self._nvlink.now, np.nan_to_num(self._nvlink.base)  # never learnt: none usually
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
        link_drop = 1 - self._link.now / self._link.base
        port = _argmax(link_drop)
        if port >= 0 and link_drop[port] >= s.min_link_drop and _stands_out(link_drop, port):
            evidence |= {"link_drop": float(link_drop[port]), "link_gbps": float(link_gbps[port])}
            return self._nic_candidate(port, evidence)
        # Waits name a port only when its peers are quiet: a slow port starves the others of data, not
        # of credits. Waits risen on many ports at once are the fabric's, or another job's on the same
        # switches: no rank inside this job is to blame. In a job with two ports, both waiting is as
        # likely one slow peer (a hot expert, a slow NIC) as the fabric: nothing is said.
        wait_rise = self._wait.now / np.maximum(self._wait.base, 1.0)
        port = _argmax(wait_rise)
        peers_quiet = port >= 0 and not _median(np.delete(wait_rise, port)) >= s.min_wait_rise / 2
        if port >= 0 and wait_rise[port] >= s.min_wait_rise and _stands_out(wait_rise, port) and peers_quiet:
            evidence |= {"xmit_wait_ratio": float(wait_rise[port]), "link_gbps": float(link_gbps[port])}
            return self._nic_candidate(port, evidence)
        # A starved host's GPUs idle between steps; a node whose GPUs stopped working altogether has left
        # the job (drained, an elastic restart without it), and the others do not wait for it.
        util_drop = np.where(self._util.now >= s.min_working_share, self._util.base - self._util.now, np.nan)
        node = _argmax(util_drop)
        if node >= 0 and util_drop[node] >= s.min_util_drop and _stands_out(util_drop, node):
            evidence |= {"util_drop": float(util_drop[node])}
            return _Candidate((node, None, None, "slow_host"), 0.0, evidence)
        # The fabric's only where the job's own bytes per second fell with its steps (a congested path
        # carries a step's bytes more slowly): waits on every port while the job sends more are its own
        # writes to storage (a checkpoint), and where traffic is unsteady nothing tells them apart.
        congested = int(np.sum(wait_rise >= s.min_wait_rise))
        throttled = evidence.get("traffic_slowdown", -math.inf) >= 0.5 * slowdown
        if congested >= max(s.min_congested_ports, wait_rise.size / 2) and throttled:
            evidence |= {"ports_congested": float(congested), "ports_wait_ratio": _median(wait_rise)}
            return _Candidate((-1, None, None, "fabric"), 0.0, evidence)
        # Last, a GPU over its share at normal clocks: busy (SM activity) or working longer while the
        # others wait for it, and doing the same work slower rather than more work.
        rise = np.fmax(share_rise, _rise(self._busy, s.min_working_share))
        rank = _argmax(rise)
        if rank < 0 or not rise[rank] >= s.min_share_rise or not _stands_out(rise, rank):
            return None
        if self._slower_not_busier(rank, share_rise[rank], rise[rank], evidence):
            return self._gpu_candidate(rank, "gpu_degraded", rise, clock, evidence)
        return None

    def _slower_not_busier(self, rank: int, work_rise: float, busy_rise: float, evidence: dict[str, float]) -> bool:
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
        power_rise = float(self._power.now[rank] / self._power.base[rank] - 1)
        if math.isfinite(power_rise):
            evidence["power_rise"] = power_rise
            return not power_rise >= s.more_work_power * work_rise
        return True

    def _clock_cause(self, t: float, rank: int) -> str:
        """thermal or power_cap where the clock was held down for that reason lately, and is below its own
        normal (a healthy GPU that always runs at its power cap shows the reason too, and given more work
        (a hot expert) is not slow); else gpu_degraded."""
        s = self.settings
        recent = t - s.fast_s
        if not self._clock.now[rank] <= (1 - s.min_clock_drop) * self._clock.base[rank]:
            return "gpu_degraded"
        if self._thermal_at[rank] >= recent:
            return "thermal"
        if self._power_cap_at[rank] >= recent:
            return "power_cap"
        return "gpu_degraded"

    def _nic_candidate(self, port: int, evidence: dict[str, float]) -> _Candidate:
        return _Candidate((int(self.port_node[port]), None, port, "slow_nic"), 0.0, evidence)

    def _gpu_candidate(
        self, rank: int, cause: str, share_rise: np.ndarray, clock: np.ndarray, evidence: dict[str, float]
    ) -> _Candidate:
        evidence |= {"share_rise": float(share_rise[rank])}
        clock_ratio = clock[rank] / _median(np.delete(clock, rank))
        if math.isfinite(clock_ratio):  # the culprit's sample can be missing while it is judged on its average
            evidence["clock_ratio"] = float(clock_ratio)
        node = int(self.node_of[rank])
        return _Candidate((node, rank - int(self._first_rank[node]), None, cause), 0.0, evidence)

    def _judge(self, t: float, found: _Candidate | None) -> tuple[StragglerEvent, ...]:
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
            self._candidate = None if found is None else _Candidate(found.key, t, found.evidence)
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


def _rise(signal: Signal, floor: float) -> np.ndarray:
    """How far each element is above its normal (now / normal - 1); NaN where the normal is below `floor`."""
    with np.errstate(all="ignore"):
        return np.where(signal.base >= floor, signal.now / signal.base - 1, np.nan)


def _ratio(values: np.ndarray, to: float) -> np.ndarray:
    with np.errstate(all="ignore"):
        return values / to


def _argmax(values: np.ndarray) -> int:
    return int(np.nanargmax(values)) if np.isfinite(values).any() else -1


def _median(values: np.ndarray) -> float:
    return float(np.median(values[np.isfinite(values)])) if np.isfinite(values).any() else math.nan


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
