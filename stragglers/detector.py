"""Straggler detection in one running job, from telemetry alone, one sample interval at a time.

Utilisation cannot find a straggler (ranks waiting in NCCL read ~100%), so the detector watches what
waiting changes: each GPU's tensor activity relative to the job's median (its "share of the work"),
the job's median activity against its own past (how much slower the whole job got), each node's GPU
utilisation (idle outside kernels: a stalled host), and each node's NIC transmit waits and link rate.

- Peers and past: every ratio is compared with the same rank's slow baseline, so a permanently heavier
  role (the last pipeline stage) is its normal, not a straggler.
- Every normal (the job's activity, each rank's share, each node's utilisation and transmit waits) is
  the median over the last `window_s` of healthy running, not a long average from the first sample: a
  job that starts slowly (compilation, data loading, warm-up, nodes spinning at the first collective)
  would otherwise leave its normals far from its steady state for tens of minutes, so that a real
  slowdown reads as none and start-up noise as a fault. The median also shrugs off the first minute of
  a fault before it is declared. The slowdown reported is the median of the estimates while active.
- Evidence is weighed most specific first: a GPU doing more than its share while its clock is held
  down for a named reason (thermal, power cap) outranks waits on a port, which any slowdown of the job
  moves (a NIC is blamed when its port stands out and no GPU explains the slowdown).
- Phases all ranks go through together (checkpoints, evaluation, start-up) are gated out: samples where
  the job's median activity collapses are skipped, and nothing is declared in the warm-up.
- Verification: a candidate is declared only while the job itself is measurably slower, and only after
  it persisted; baselines are frozen while a straggler is active so a long one does not become normal.
"""

from __future__ import annotations

import math
import warnings
from collections import deque
from dataclasses import dataclass, field

import numpy as np

HW_THERMAL_SLOWDOWN = 0x40  # NVML clock event reason bits
SW_THERMAL_SLOWDOWN = 0x20
SW_POWER_CAP = 0x4


@dataclass(frozen=True)
class Settings:
    sample_s: float = 5.0
    fast_s: float = 20.0  # time constant of the current estimate
    window_s: float = 600.0  # every normal is the median over this much healthy past
    refresh_s: float = 30.0  # ... taken again this often
    max_freeze_s: float = 2400.0  # normals stand still for an active straggler this long at most
    warmup_s: float = 600.0  # learning only after a job starts: a full window, as GPUs settle thermally
    persist_s: float = 30.0  # a candidate must hold this long to be declared, and be gone this long to end
    min_share_rise: float = 0.05  # a rank's share of the work above its own normal by this much
    min_job_slowdown: float = 0.03  # and the job measurably slower: the verification step
    min_util_drop: float = 0.06  # a node's GPUs idle outside kernels by this much more than their peers
    min_wait_rise: float = 4.0  # a port's transmit waits this many times its normal
    min_link_drop: float = 0.1  # or its link running this much below its normal rate (trained down)
    gate_activity: float = 5.0  # job median tensor activity (%) below this: a pause, skipped


@dataclass
class Straggler:
    """A declared straggler: where, why, how bad, since when (and until when, once over)."""

    node: int  # position of the node in the job
    gpu: int | None  # local GPU index on that node; None for a node or NIC
    cause: str  # thermal | power_cap | slow_nic | slow_host | unknown
    started_s: float
    slowdown: float  # estimated job slowdown: the median of the (latest) estimates while active
    declared_s: float = 0.0  # when persistence was reached: started_s + persist_s at the earliest
    evidence: dict[str, float] = field(default_factory=dict)
    ended_s: float | None = None
    # The job slowdown per sample while active: the last 720 (an hour at 5 s), so a long one stays cheap.
    estimates: deque[float] = field(default_factory=lambda: deque(maxlen=720), repr=False)


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
        fast = 1 - math.exp(-s.sample_s / s.fast_s)
        window = max(3, round(s.window_s / s.sample_s))
        refresh = max(1, round(s.refresh_s / s.sample_s))
        self._started: float | None = None
        self._share = _Signal(fast, window, refresh)  # rank's tensor activity / job median
        self._util = _Signal(fast, window, refresh)  # node's median GPU utilisation / the other nodes'
        self._level = _Signal(fast, window, refresh)  # job median tensor activity
        self._wait = _Signal(fast, window, refresh)  # node's transmit waits per second (log)
        self._link = _Signal(fast, window, refresh)  # node's slowest link rate
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
        # Normals stand still while a straggler is active, so a long one does not become normal; but
        # not for ever, or a wrong declaration (a job that settled slower after its start, say) would
        # keep itself alive by keeping the normal it is judged against.
        frozen = self.active is not None and t - self.active.started_s < s.max_freeze_s
        self._share.add(tensor / level, learn=not frozen)
        self._util.add(node_util, learn=not frozen)
        self._level.add(np.array([level]), learn=not frozen)
        self._wait.add(np.log10(np.maximum(xmit_wait_rate, 1.0)), learn=not frozen)
        self._link.add(link_gbps, learn=not frozen)
        if t - self._started < s.warmup_s:
            return
        self._judge(t, self._find(clock, reasons, link_gbps))

    def _find(self, clock: np.ndarray, reasons: np.ndarray, link_gbps: np.ndarray) -> _Candidate | None:
        """The most likely culprit now, if the job is slower than its normal."""
        s = self.settings
        slowdown = float(self._level.base[0] / self._level.now[0] - 1)
        if not slowdown >= s.min_job_slowdown:
            return None
        evidence = {"job_slowdown": slowdown}
        share_rise = self._share.now / self._share.base - 1
        rank = int(np.nanargmax(share_rise)) if np.isfinite(share_rise).any() else -1
        gpu_found = rank >= 0 and share_rise[rank] >= s.min_share_rise and _stands_out(share_rise, rank)
        cause = _clock_cause(int(np.nan_to_num(reasons[rank]))) if gpu_found else "unknown"
        if gpu_found and cause != "unknown":
            return self._gpu_candidate(rank, cause, share_rise, clock, evidence)
        # A link trained to a lower rate names its own node; transmit waits can show on the port that
        # sends into the slow one (credit back-pressure), so they come second.
        link_drop = 1 - self._link.now / self._link.base
        node = int(np.nanargmax(link_drop)) if np.isfinite(link_drop).any() else -1
        if node >= 0 and link_drop[node] >= s.min_link_drop and _stands_out(link_drop, node):
            evidence |= {"link_drop": float(link_drop[node]), "link_gbps": float(link_gbps[node])}
            return _Candidate((node, None, "slow_nic"), 0.0, evidence)
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
        if gpu_found:
            return self._gpu_candidate(rank, cause, share_rise, clock, evidence)
        return None

    def _gpu_candidate(
        self, rank: int, cause: str, share_rise: np.ndarray, clock: np.ndarray, evidence: dict[str, float]
    ) -> _Candidate:
        peers_clock = float(np.nanmedian(np.delete(clock, rank)))
        evidence |= {"share_rise": float(share_rise[rank]), "clock_ratio": float(clock[rank] / peers_clock)}
        node = int(self.node_of[rank])
        return _Candidate((node, rank - int(self._first_rank[node]), cause), 0.0, evidence)

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


class _Signal:
    """Per element: `now`, a fast exponentially weighted mean, and `base`, the median of the last
    `window` values learnt (a ring; NaN for missing). Missing values leave `now` as it is. The median
    is taken again every `refresh` values learnt: a normal over ten minutes moves too slowly for the
    difference to matter, and the median is most of the detector's cost."""

    def __init__(self, fast: float, window: int, refresh: int = 1) -> None:
        self.fast, self.window, self.refresh = fast, window, refresh
        self._learnt = 0
        self.now = np.empty(0)
        self._ring = np.empty((0, window))
        self._next = 0
        self.base = np.empty(0)

    def add(self, values: np.ndarray, learn: bool) -> None:
        values = values.astype(float)
        if self.now.size == 0:
            self.now = values.copy()
            self._ring = np.full((values.size, self.window), np.nan)
        seen = np.isfinite(values)
        fill_now = ~np.isfinite(self.now) & seen
        self.now[fill_now] = values[fill_now]
        self.now[seen] += self.fast * (values[seen] - self.now[seen])
        if learn:
            self._ring[:, self._next] = values
            self._next = (self._next + 1) % self.window
            self._learnt += 1
            if self.base.size and self._learnt % self.refresh:
                return
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # an element never seen: NaN, as it should
                self.base = np.nanmedian(self._ring, axis=1)


def _clock_cause(bits: int) -> str:
    if bits & (HW_THERMAL_SLOWDOWN | SW_THERMAL_SLOWDOWN):
        return "thermal"
    if bits & SW_POWER_CAP:
        return "power_cap"
    return "unknown"


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
