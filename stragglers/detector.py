"""Straggler detection in one running job, from telemetry alone, one sample interval at a time.

Utilisation cannot find a straggler (ranks waiting in NCCL read ~100%), so the detector watches what
waiting changes: each GPU's tensor activity relative to the job's median (its "share of the work"),
the job's median activity against its own past (how much slower the whole job got), each node's GPU
utilisation (idle outside kernels: a stalled host), and each node's NIC transmit waits and link rate.

- Peers and past: every ratio is compared with the same rank's slow baseline, so a permanently heavier
  role (the last pipeline stage) is its normal, not a straggler.
- The job's own past is the median of its activity over the last `level_window_s` of healthy running,
  not a long average from its first sample: a job that starts slowly (compilation, data loading,
  warm-up) would otherwise leave its normal far below its steady state for tens of minutes, and a real
  slowdown would read as none. The median also shrugs off the first minute of a fault before it is
  declared. The slowdown reported is the median of the estimates while the straggler is active.
- Phases all ranks go through together (checkpoints, evaluation, start-up) are gated out: samples where
  the job's median activity collapses are skipped, and nothing is declared in the warm-up.
- Verification: a candidate is declared only while the job itself is measurably slower, and only after
  it persisted; baselines are frozen while a straggler is active so a long one does not become normal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

HW_THERMAL_SLOWDOWN = 0x40  # NVML clock event reason bits
SW_THERMAL_SLOWDOWN = 0x20
SW_POWER_CAP = 0x4


@dataclass(frozen=True)
class Settings:
    sample_s: float = 5.0
    fast_s: float = 20.0  # time constant of the current estimate
    slow_s: float = 1200.0  # time constant of the per-rank and per-node baselines
    level_window_s: float = 600.0  # the job's normal activity: the median over this much healthy past
    warmup_s: float = 300.0  # learning only after a job starts
    persist_s: float = 30.0  # a candidate must hold this long to be declared, and be gone this long to end
    min_share_rise: float = 0.05  # a rank's share of the work above its own normal by this much
    min_job_slowdown: float = 0.03  # and the job measurably slower: the verification step
    min_util_drop: float = 0.06  # a node's GPUs idle outside kernels by this much more than their peers
    min_wait_rise: float = 4.0  # a port's transmit waits this many times its normal
    gate_activity: float = 5.0  # job median tensor activity (%) below this: a pause, skipped


@dataclass
class Straggler:
    """A declared straggler: where, why, how bad, since when (and until when, once over)."""

    node: int  # position of the node in the job
    gpu: int | None  # local GPU index on that node; None for a node or NIC
    cause: str  # thermal | power_cap | slow_nic | slow_host | unknown
    started_s: float
    slowdown: float  # estimated job slowdown: the median of the estimates while active
    declared_s: float = 0.0  # when persistence was reached: started_s + persist_s at the earliest
    evidence: dict[str, float] = field(default_factory=dict)
    ended_s: float | None = None
    estimates: list[float] = field(default_factory=list, repr=False)  # job slowdown per sample while active


@dataclass
class _Candidate:
    key: tuple[int, int | None, str]  # (node, gpu, cause)
    since_s: float
    evidence: dict[str, float]


class JobDetector:
    def __init__(self, nodes: int, gpus_per_node: int, settings: Settings | None = None) -> None:
        self.__init_ranks(np.arange(nodes * gpus_per_node) // gpus_per_node, settings)

    @classmethod
    def for_ranks(cls, node_of: np.ndarray, settings: Settings | None = None) -> JobDetector:
        """A job whose ranks sit on nodes 0..n-1 as `node_of` says (any number of GPUs per node)."""
        detector = cls.__new__(cls)
        detector.__init_ranks(np.asarray(node_of), settings)
        return detector

    def __init_ranks(self, node_of: np.ndarray, settings: Settings | None) -> None:
        self.settings = s = settings or Settings()
        self.node_of = node_of
        self.nodes = int(node_of.max()) + 1 if node_of.size else 0
        self._first_rank = np.array([int(np.argmax(node_of == n)) for n in range(self.nodes)])
        self._fast = 1 - math.exp(-s.sample_s / s.fast_s)
        self._slow = 1 - math.exp(-s.sample_s / s.slow_s)
        self._started: float | None = None
        self._share = _Ewma(self._fast, self._slow)  # rank's tensor activity / job median
        self._util = _Ewma(self._fast, self._slow)  # node's median GPU utilisation / the other nodes'
        self._level = _Ewma(self._fast, self._slow)  # job median tensor activity (its `now`)
        self._normal = _Window(max(1, round(s.level_window_s / s.sample_s)))  # ... and its normal
        self._wait = _Ewma(self._fast, self._slow)  # node's transmit waits per second (log)
        self._candidate: _Candidate | None = None
        self._quiet_since: float | None = None
        self.active: Straggler | None = None
        self.declared: list[Straggler] = []

    def update(
        self,
        t: float,
        tensor: np.ndarray,
        util: np.ndarray,
        clock: np.ndarray,
        reasons: np.ndarray,
        xmit_wait_rate: np.ndarray,
        link_gbps: np.ndarray,
    ) -> None:
        """One sample: per-GPU arrays (ranks,) with NaN for a missing sample, per-node arrays (nodes,)."""
        s = self.settings
        level = float(np.nanmedian(tensor)) if np.isfinite(tensor).any() else math.nan
        if not level >= s.gate_activity:
            return  # a pause every rank takes together: neither evidence nor baseline
        if self._started is None:
            self._started = t
        # Each node's utilisation against the other nodes' (not the job's, which a stalled node drags
        # down with it when it is half of a two-node job).
        per_node = np.array([_median(util[self.node_of == n]) for n in range(self.nodes)])
        others = np.array([_median(np.delete(per_node, n)) for n in range(self.nodes)]) if self.nodes > 1 else per_node
        with np.errstate(all="ignore"):
            node_util = per_node / others
        frozen = self.active is not None
        self._share.add(tensor / level, learn=not frozen)
        self._util.add(node_util, learn=not frozen)
        self._level.add(np.array([level]), learn=not frozen)
        if not frozen:
            self._normal.add(level)
        self._wait.add(np.log10(np.maximum(xmit_wait_rate, 1.0)), learn=not frozen)
        if t - self._started < s.warmup_s:
            return
        self._judge(t, self._find(clock, reasons, link_gbps))

    def _find(self, clock: np.ndarray, reasons: np.ndarray, link_gbps: np.ndarray) -> _Candidate | None:
        """The most likely culprit now, if the job is slower than its normal."""
        s = self.settings
        slowdown = float(self._normal.median() / self._level.now[0] - 1)
        if not slowdown >= s.min_job_slowdown:
            return None
        evidence = {"job_slowdown": slowdown}
        wait_rise = 10 ** (self._wait.now - self._wait.base)
        port = int(np.nanargmax(wait_rise)) if np.isfinite(wait_rise).any() else -1
        if port >= 0 and wait_rise[port] >= s.min_wait_rise and _stands_out(wait_rise, port):
            evidence |= {"xmit_wait_ratio": float(wait_rise[port]), "link_gbps": float(link_gbps[port])}
            return _Candidate((port, None, "slow_nic"), 0.0, evidence)
        util_drop = self._util.base - self._util.now
        node = int(np.nanargmax(util_drop)) if np.isfinite(util_drop).any() else -1
        if node >= 0 and util_drop[node] >= s.min_util_drop and _stands_out(util_drop, node):
            evidence |= {"util_drop": float(util_drop[node])}
            return _Candidate((node, None, "slow_host"), 0.0, evidence)
        share_rise = self._share.now / self._share.base - 1
        rank = int(np.nanargmax(share_rise)) if np.isfinite(share_rise).any() else -1
        if rank >= 0 and share_rise[rank] >= s.min_share_rise and _stands_out(share_rise, rank):
            bits = int(np.nan_to_num(reasons[rank]))
            peers_clock = float(np.nanmedian(np.delete(clock, rank)))
            if bits & (HW_THERMAL_SLOWDOWN | SW_THERMAL_SLOWDOWN):
                cause = "thermal"
            elif bits & SW_POWER_CAP:
                cause = "power_cap"
            else:
                cause = "unknown"
            evidence |= {"share_rise": float(share_rise[rank]), "clock_ratio": float(clock[rank] / peers_clock)}
            node = int(self.node_of[rank])
            return _Candidate((node, rank - int(self._first_rank[node]), cause), 0.0, evidence)
        return None

    def _judge(self, t: float, found: _Candidate | None) -> None:
        """Persistence: declare a candidate that held persist_s; end a straggler gone for persist_s."""
        s = self.settings
        if self.active is not None:
            same = found is not None and found.key[:2] == (self.active.node, self.active.gpu)
            if same:
                assert found is not None
                self._quiet_since = None
                self.active.estimates.append(found.evidence["job_slowdown"])
                self.active.slowdown = float(np.median(self.active.estimates))
            elif self._quiet_since is None:
                self._quiet_since = t
            elif t - self._quiet_since >= s.persist_s:
                self.active.ended_s = self._quiet_since
                self.active, self._quiet_since = None, None
            return
        if found is None or self._candidate is None or self._candidate.key != found.key:
            self._candidate = None if found is None else _Candidate(found.key, t, found.evidence)
            return
        if t - self._candidate.since_s >= s.persist_s:
            node, gpu, cause = found.key
            self.active = Straggler(node, gpu, cause, self._candidate.since_s, found.evidence["job_slowdown"], t)
            self.active.evidence = found.evidence
            self.active.estimates.append(found.evidence["job_slowdown"])
            self.declared.append(self.active)
            self._candidate = None


class _Ewma:
    """A fast and a slow exponentially weighted mean per element; missing values leave both as they are."""

    def __init__(self, fast: float, slow: float) -> None:
        self.fast, self.slow = fast, slow
        self.now = np.empty(0)
        self.base = np.empty(0)

    def add(self, values: np.ndarray, learn: bool) -> None:
        if self.now.size == 0:
            self.now, self.base = values.astype(float).copy(), values.astype(float).copy()
            return
        seen = np.isfinite(values)
        fill_now = ~np.isfinite(self.now) & seen
        self.now[fill_now] = values[fill_now]
        self.now[seen] += self.fast * (values[seen] - self.now[seen])
        if learn:
            fill_base = ~np.isfinite(self.base) & seen
            self.base[fill_base] = values[fill_base]
            self.base[seen] += self.slow * (values[seen] - self.base[seen])


class _Window:
    """The last `size` values of a scalar (a ring), for a median that forgets what it is older."""

    def __init__(self, size: int) -> None:
        self._values = np.full(size, np.nan)
        self._next = 0

    def add(self, value: float) -> None:
        self._values[self._next] = value
        self._next = (self._next + 1) % self._values.size

    def median(self) -> float:
        return _median(self._values)


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
