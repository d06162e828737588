"""Many jobs' straggler detectors advanced in one numpy pass: jobs of one layout (the same ranks on the
same nodes, the same ports) as rows of 2-D arrays.

A fleet runs thousands of jobs of a few shapes (single nodes of 8 GPUs, mostly), and the detector's
arithmetic on arrays of 8 is numpy's per-call overhead, not arithmetic: one job at a time, the watch's
cycle outgrew its 5 s at 100,000 GPUs. Here every step of JobDetector.update (stragglers/detector.py)
runs once for all the rows it concerns, value for value the same arithmetic (element-wise, medians by
sorting, sums in the same order), and the judgement (stragglers/judge.py) runs per job only where a job
has something to judge: slower than its normal, or a candidate or a straggler to follow. Decisions are
the one-job detector's, event for event (tests/stragglers/test_batched_detector.py)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from gpuscope.stragglers.detector import HW_THERMAL_SLOWDOWN, SW_POWER_CAP, SW_THERMAL_SLOWDOWN, Settings
from gpuscope.stragglers.events import Straggler, StragglerEvent
from gpuscope.stragglers.judge import JobSignals, Judge
from gpuscope.stragglers.readings import ReadingRows
from gpuscope.stragglers.signal import SignalRows, finite_median_rows
from gpuscope.stragglers.synchrony import SynchronyRows

Layout = tuple[tuple[int, ...], tuple[int, ...]]  # (node of each rank, node of each port)


@dataclass(frozen=True)
class _RowView:
    """One row of a SignalRows, as the judge reads a signal: views, so they follow the arrays in place."""

    now: np.ndarray
    base: np.ndarray
    spread: np.ndarray


class DetectorBatch:
    """The detectors of jobs of one layout, a row each (`add`, `remove`), fed together (`update`)."""

    def __init__(self, node_of: np.ndarray, port_node: np.ndarray, settings: Settings) -> None:
        self.settings = s = settings
        self.node_of, self.port_node = np.asarray(node_of), np.asarray(port_node)
        self.nodes = int(self.node_of.max()) + 1 if self.node_of.size else 0
        self._ranks_of_node = [np.flatnonzero(self.node_of == n) for n in range(self.nodes)]
        gpus, ports = self.node_of.size, self.port_node.size
        fast = 1 - math.exp(-s.sample_s / s.fast_s)
        block = max(1, round(s.block_s / s.sample_s))
        blocks = max(3, round(s.window_s / (block * s.sample_s)))
        self._level = SignalRows(1, fast, blocks, block)
        self._traffic = SignalRows(1, fast, blocks, block, spread=True)
        self._share, self._busy, self._power, self._nvlink, self._clock = (
            SignalRows(gpus, fast, blocks, block) for _ in range(5)
        )
        self._util = SignalRows(self.nodes, fast, blocks, block)
        self._wait, self._link = SignalRows(ports, fast, blocks, block), SignalRows(ports, fast, blocks, block)
        self._signals = (
            self._level, self._traffic, self._share, self._util, self._wait, self._link,
            self._busy, self._power, self._nvlink, self._clock,
        )  # fmt: skip
        self._synchrony = SynchronyRows.for_job(self.node_of, blocks, block)
        # Per row: what JobDetector keeps in scalars, NaN for None.
        self._started = np.zeros(0)
        self._paused_at = np.zeros(0)
        self._thermal_at, self._power_cap_at = np.zeros((0, gpus)), np.zeros((0, gpus))
        self._active_since = np.zeros(0)  # the active straggler's start (NaN: none), as its judge last said
        self._has_candidate = np.zeros(0, dtype=bool)
        self._judges: list[Judge] = []
        self._free: list[int] = []

    @property
    def jobs(self) -> int:
        return len(self._judges) - len(self._free)

    def add(self) -> int:
        """A new job's row, its detector as JobDetector starts."""
        if not self._free:
            self._resize(max(16, 2 * len(self._judges)))
        row = self._free.pop()
        for signal in self._signals:
            signal.reset(row)
        self._synchrony.reset(row)
        self._started[row], self._paused_at[row], self._active_since[row] = np.nan, -math.inf, np.nan
        self._thermal_at[row], self._power_cap_at[row], self._has_candidate[row] = -math.inf, -math.inf, False
        self._judges[row] = Judge(self.settings, self.node_of, self.port_node)
        return row

    def remove(self, row: int) -> None:
        """The job ended: its row is free for another."""
        self._free.append(row)

    def active(self, row: int) -> Straggler | None:
        return self._judges[row].active

    def model(self, row: int) -> str:
        return self._synchrony.model_of(row)

    def wander(self, row: int) -> float:
        return float(self._synchrony.wander[row])

    def _resize(self, rows: int) -> None:
        before = len(self._judges)
        for signal in self._signals:
            signal.resize(rows)
        self._synchrony.resize(rows)
        self._started, self._paused_at, self._active_since = (
            np.concatenate([a, np.full(rows - before, np.nan)])
            for a in (self._started, self._paused_at, self._active_since)
        )
        self._thermal_at, self._power_cap_at = (
            np.vstack([a, np.full((rows - before, self.node_of.size), -math.inf)])
            for a in (self._thermal_at, self._power_cap_at)
        )
        self._has_candidate = np.concatenate([self._has_candidate, np.zeros(rows - before, dtype=bool)])
        judge = Judge(self.settings, self.node_of, self.port_node)
        self._judges.extend(judge for _ in range(rows - before))  # placeholders: add() gives each its own
        self._free.extend(range(rows - 1, before - 1, -1))

    def update(self, rows: np.ndarray, readings: ReadingRows) -> dict[int, tuple[StragglerEvent, ...]]:
        """JobDetector.update for each of `rows` (distinct, added), its readings a row of `readings`; what
        changed, for the rows where something did."""
        given = (readings.jobs, readings.work.shape[1], readings.xmit_wait_per_s.shape[1])
        if given != (rows.size, self.node_of.size, self.port_node.size):
            raise ValueError(
                "reading rows of {} jobs of {} GPUs and {} ports for {} jobs of {} GPUs and {} ports".format(
                    *given, rows.size, self.node_of.size, self.port_node.size
                )
            )
        s, t = self.settings, readings.t_s
        level = finite_median_rows(readings.work)
        self._level.observe(rows, level[:, None])
        paused = self._paused(rows)
        for row in rows[paused & self._has_candidate[rows]]:
            self._judges[row].pause()
        self._has_candidate[rows[paused]] = False
        self._paused_at[rows[paused]] = t
        running = ~paused
        rows, level, readings = rows[running], level[running], readings.of(running)
        # The fast averages climb back for a while after a pause: neither judged nor learnt meanwhile.
        settling = t - self._paused_at[rows] < s.after_pause_s
        self._started[rows] = np.where(np.isnan(self._started[rows]), t, self._started[rows])
        signals = self._observe(rows, readings)
        learnt = ~settling
        rows, level, readings = rows[learnt], level[learnt], readings.of(learnt)
        signals = [(signal, values[learnt]) for signal, values in signals]
        # Normals stand still while a straggler is active (not for ever: stragglers/detector.py).
        active_since = self._active_since[rows]
        learning = np.isnan(active_since) | (t - active_since >= s.max_freeze_s)
        some = rows[learning]
        self._level.learn(some, level[learning, None])
        self._synchrony.learn(some, readings.work[learning])
        for signal, values in signals:
            signal.learn(some, values[learning])
        judged = t - self._started[rows] >= s.warmup_s
        rows, readings = rows[judged], readings.of(judged)
        bits = np.nan_to_num(readings.clock_event_reasons).astype(np.int64)
        thermal, power_cap = (bits & (HW_THERMAL_SLOWDOWN | SW_THERMAL_SLOWDOWN)) != 0, (bits & SW_POWER_CAP) != 0
        self._thermal_at[rows] = np.where(thermal, t, self._thermal_at[rows])
        self._power_cap_at[rows] = np.where(power_cap, t, self._power_cap_at[rows])
        return self._judge(t, rows, readings)

    def _paused(self, rows: np.ndarray) -> np.ndarray:
        """JobDetector._paused, per row."""
        s = self.settings
        activity, normal = self._level.now[rows, 0], self._level.base[rows, 0]
        floor = np.where(np.isfinite(normal), np.maximum(s.gate_activity, s.pause_fraction * normal), s.gate_activity)
        return ~(activity >= floor)

    def _observe(self, rows: np.ndarray, readings: ReadingRows) -> list[tuple[SignalRows, np.ndarray]]:
        """Each signal's values for `rows`, observed; as JobDetector.update computes them."""
        util = readings.util_pct
        per_node = np.column_stack([finite_median_rows(util[:, ranks]) for ranks in self._ranks_of_node])
        others = (
            np.column_stack([finite_median_rows(np.delete(per_node, n, axis=1)) for n in range(self.nodes)])
            if self.nodes > 1
            else per_node
        )
        xmit = readings.xmit_bytes_per_s
        with np.errstate(all="ignore"):
            node_util = per_node / others
            sent = np.where(np.isfinite(xmit).any(axis=1), _nanmedian_rows(xmit), np.nan)
            signals = [
                (self._share, readings.work / self._level.now[rows]),
                (self._util, node_util),
                (self._traffic, sent[:, None]),
                (self._wait, readings.xmit_wait_per_s),
                (self._link, readings.link_gbps),
                (self._busy, readings.sm_active_pct / finite_median_rows(readings.sm_active_pct)[:, None]),
                (self._power, readings.power_w / finite_median_rows(readings.power_w)[:, None]),
                (self._nvlink, readings.nvlink_errors_per_s),
                (self._clock, readings.sm_clock_mhz),
            ]
        for signal, values in signals:
            signal.observe(rows, values)
        return signals

    def _judge(self, t: float, rows: np.ndarray, readings: ReadingRows) -> dict[int, tuple[StragglerEvent, ...]]:
        """The judge of each row that has something to judge: its job slower than its normal (where it is
        judged at all), or a candidate or a straggler to follow. The others' judgement is known: nothing."""
        synchronous = self._synchrony.synchronous(rows)
        with np.errstate(all="ignore"):
            slowdown = self._level.base[rows, 0] / self._level.now[rows, 0] - 1
        busy = (synchronous & (slowdown >= self.settings.min_job_slowdown)) | ~np.isnan(self._active_since[rows])
        busy |= self._has_candidate[rows]
        changed = {}
        for i in np.flatnonzero(busy):
            row = int(rows[i])
            judge = self._judges[row]
            events = judge.step(
                t, self._job_signals(row), readings.sm_clock_mhz[i], readings.link_gbps[i], bool(synchronous[i])
            )
            self._has_candidate[row] = judge.has_candidate
            self._active_since[row] = math.nan if judge.active is None else judge.active.started_s
            if events:
                changed[row] = events
        return changed

    def _job_signals(self, row: int) -> JobSignals:
        level, traffic, share, util, wait, link, busy, power, nvlink, clock = (
            _RowView(signal.now[row], signal.base[row], signal.spread[row]) for signal in self._signals
        )
        return JobSignals(
            level, traffic, share, util, wait, link, busy, power, nvlink, clock,
            self._thermal_at[row], self._power_cap_at[row],
        )  # fmt: skip


class BatchedDetector:
    """One job's detector, a row of its layout's batch: what the watch asks of a job's detector."""

    def __init__(self, batch: DetectorBatch, row: int) -> None:
        self.batch, self.row = batch, row

    @property
    def node_of(self) -> np.ndarray:
        return self.batch.node_of

    @property
    def active(self) -> Straggler | None:
        return self.batch.active(self.row)

    @property
    def model(self) -> str:
        """As JobDetector.model."""
        return self.batch.model(self.row)

    @property
    def wander(self) -> float:
        return self.batch.wander(self.row)

    def release(self) -> None:
        self.batch.remove(self.row)


class DetectorBatches:
    """Every followed job's detector, in a batch per layout."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.batches: dict[Layout, DetectorBatch] = {}
        self._given: dict[int, BatchedDetector] = {}  # id -> every detector added and not yet freed

    def add(self, node_of: Iterable[int], port_node: Iterable[int]) -> BatchedDetector:
        layout = (tuple(int(n) for n in node_of), tuple(int(n) for n in port_node))
        batch = self.batches.get(layout)
        if batch is None:
            batch = self.batches[layout] = DetectorBatch(
                np.array(layout[0], dtype=int), np.array(layout[1], dtype=int), self.settings
            )
        detector = BatchedDetector(batch, batch.add())
        self._given[id(detector)] = detector
        return detector

    def keep(self, detectors: Iterable[BatchedDetector]) -> None:
        """Free the rows of every detector added but not among `detectors`: their jobs are no longer followed
        (ended, changed shape, or gone to another collector's shard), however they went."""
        kept = {id(detector) for detector in detectors}
        for key in [key for key in self._given if key not in kept]:
            self._given.pop(key).release()


def _nanmedian_rows(values: np.ndarray) -> np.ndarray:
    """np.nanmedian of each row, as the detector takes the job's bytes per second: NaN left out (sorted
    last), infinities kept."""
    if values.shape[1] == 0:
        return np.full(values.shape[0], np.nan)
    ordered = np.sort(values, axis=1)
    count = (~np.isnan(values)).sum(axis=1)
    index = np.arange(values.shape[0])
    low, high = np.maximum(count - 1, 0) // 2, count // 2
    with np.errstate(all="ignore"):
        middle = (ordered[index, low] + ordered[index, high]) / 2
    return np.where(count > 0, middle, np.nan)
