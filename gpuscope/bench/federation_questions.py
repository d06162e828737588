"""The four questions of `bench peers`, asked of one database the way the read API asks them (the same
query-layer calls with the same arguments), timed, with answers reduced to plain values so that the
coordinator's and the single database's can be compared: GPUs by UUID, not by id (ids differ)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from psycopg import Connection

from gpuscope.bench.telemetry import JobSpan, Telemetry
from gpuscope.bench.timing import p95, timed
from gpuscope.collector import query
from gpuscope.collector.query.timerange import TimeRange, bucket_for

NAMES = ("heatmap", "rack_power", "job", "hottest")
HEATMAP_HOURS = 6
HOTTEST = 10
# The rollups sum real (float4) samples as real, in each database's scan order: the same minute rolled
# up in two databases may differ in the last bits of a float4 (a relative 6e-8 per addition).
RELATIVE_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Timing:
    times_ms: list[float]

    @property
    def p50(self) -> float:
        return round(statistics.median(self.times_ms), 1)

    @property
    def p95(self) -> float:
        return round(p95(self.times_ms), 1)


def questions(conn: Connection[Any], telemetry: Telemetry, job: JobSpan) -> dict[str, Callable[[], Any]]:
    """Each question as a call returning its comparable answer."""
    t = telemetry
    end = t.end + t.step_s  # the range covers the last sample
    heatmap_range = _range(max(t.start, end - HEATMAP_HOURS * 3600), end)
    day = _range(t.start, end)
    job_range = _range(t.start + job.first_step * t.step_s, t.start + job.end_step * t.step_s)

    def heatmap() -> Any:
        query.inventory_counts(conn)  # the API's check of the answer's size
        answer = query.heatmap(conn, "util_pct", heatmap_range, 60)
        return [r.uuid for r in answer.rows], answer.times, answer.values

    def rack_power() -> Any:
        query.rack_count(conn)
        answer = query.rack_power(conn, day, chart_step(day))
        return answer.racks, answer.times, answer.watts

    def job_panel() -> Any:
        gpu_ids = query.select_gpus(conn, job=job.job_id)
        answer = query.series(conn, ["util_pct", "power_w"], job_range, chart_step(job_range), gpu_ids)
        return [r.uuid for r in answer.rows], answer.times, answer.values["util_pct"], answer.values["power_w"]

    def hottest() -> Any:
        found = query.top_gpus(conn, "temp_c", HOTTEST, "desc", at=_time(t.end + 1))
        return [(row.gpu.uuid, row.ts, row.value) for row in found]

    return {"heatmap": heatmap, "rack_power": rack_power, "job": job_panel, "hottest": hottest}


def ask(conn: Connection[Any], telemetry: Telemetry, job: JobSpan, runs: int) -> dict[str, tuple[Timing, Any]]:
    """Each question warmed once and timed `runs` times; its timing and last answer."""
    answers = {}
    for name, question in questions(conn, telemetry, job).items():
        times, answer = timed(question, runs)
        answers[name] = (Timing(times), answer)
    return answers


def differences(ours: Any, theirs: Any) -> list[str]:
    """Where two answers differ (labels, times, values beyond rounding, missing values); [] if equal."""
    if isinstance(ours, np.ndarray) or isinstance(theirs, np.ndarray):
        a, b = np.asarray(ours, dtype=np.float64), np.asarray(theirs, dtype=np.float64)
        if a.shape != b.shape:
            return [f"shape {a.shape} != {b.shape}"]
        if not np.array_equal(np.isnan(a), np.isnan(b)):
            return ["missing values differ"]
        close = np.isclose(a, b, rtol=RELATIVE_TOLERANCE, atol=0, equal_nan=True)
        return [] if close.all() else [f"{int((~close).sum())} values differ"]
    if isinstance(ours, tuple | list) and isinstance(theirs, tuple | list):
        if len(ours) != len(theirs):
            return [f"{len(ours)} items != {len(theirs)}"]
        return [problem for a, b in zip(ours, theirs, strict=True) for problem in differences(a, b)]
    if isinstance(ours, float) and isinstance(theirs, float):
        return [] if math.isclose(ours, theirs, rel_tol=RELATIVE_TOLERANCE) else [f"{ours} != {theirs}"]
    return [] if ours == theirs else [f"{ours!r} != {theirs!r}"]


def chart_step(time_range: TimeRange) -> int:
    """The bucket the read API picks for a chart of the range, at least a whole minute (as bench peers)."""
    return max(60, -(-bucket_for(time_range) // 60) * 60)


def longest_finished_job(telemetry: Telemetry) -> JobSpan:
    """The job a researcher asks after: the longest (and widest) that ended within the range."""
    ended = [j for j in telemetry.jobs if j.end_step < telemetry.steps] or list(telemetry.jobs)
    return max(ended, key=lambda j: (len(j.gpus), j.end_step - j.first_step))


def _range(start: float, end: float) -> TimeRange:
    return TimeRange(_time(start), _time(end))


def _time(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
