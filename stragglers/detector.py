"""Straggler detection in one running job, from telemetry alone, one sample interval at a time.

Utilisation cannot find a straggler (ranks waiting in NCCL read ~100%), so the detector watches what
waiting changes: each GPU's tensor activity relative to the job's (its "share of the work"), the job's
median activity against its own past (how much slower the whole job got), the bytes the job sends per
second (a second route to the same slowdown), each node's GPU utilisation (idle outside kernels: a
stalled host), and each InfiniBand port's transmit waits and link rate.
Each update takes one sample interval's readings by name (stragglers/readings.py) and returns what
changed (stragglers/events.py): a straggler declared, its estimate updated, its end. This module keeps
the signals up to date and gates them; the judgement on them is stragglers/judge.py's, and many jobs of
one layout are advanced together, to the same decisions, by stragglers/batch.py.

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
from dataclasses import dataclass

import numpy as np

from gpuscope.stragglers.events import Straggler, StragglerEvent
from gpuscope.stragglers.judge import JobSignals, Judge
from gpuscope.stragglers.readings import Readings
from gpuscope.stragglers.signal import Signal
from gpuscope.stragglers.signal import finite_median as _median
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
        self._signals = JobSignals(
            self._level,
            self._traffic,
            self._share,
            self._util,
            self._wait,
            self._link,
            self._busy,
            self._power,
            self._nvlink,
            self._clock,
            self._thermal_at,
            self._power_cap_at,
        )
        self._judge = Judge(s, node_of, self.port_node)

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
            self._judge.pause()
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
        return self._judge.step(t, self._signals, clock, link_gbps, self._synchrony.synchronous)

    @property
    def active(self) -> Straggler | None:
        """The straggler active in the job, as last reported."""
        return self._judge.active

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


def _ratio(values: np.ndarray, to: float) -> np.ndarray:
    with np.errstate(all="ignore"):
        return values / to
