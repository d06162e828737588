"""The five questions of the peer bench in PromQL, raw and from recording rules, timed and checked.

Buckets are gpuscope's: [b, b + step) with b a multiple of the step (epoch-aligned), one value per GPU
(or rack) per bucket, the mean of its samples. A range query evaluated at the bucket's end would not give
that in Prometheus 2.x: `[1m]` at a minute boundary holds 7 samples of a 10 s grid (its window includes
both ends), one shared with the next minute. So every range query is evaluated 1 s before its bucket
ends (t = b + step - 1) with the range `[step]`: the window [b - 1, b + step - 1] holds the bucket's
samples and no other. What Grafana sends by default ($__interval at aligned steps) double counts the
boundary samples; the answers here are the ones gpuscope's API gives.

- heatmap: every GPU's utilisation over the last 6 h, one value per minute.
- rack power over the day: `sum by (cluster, rack) (avg_over_time(...[step]))`, the bucket's mean power
  per rack, not `sum by (rack) (gpuscope_gpu_power_watts)`: that takes one sample per step (1 in 30 at
  a 5-minute step), a different answer from the mean gpuscope returns.
- one job over its life: its GPUs' utilisation and power (two queries, as a panel with two series sets),
  joined to `gpuscope_gpu_job_info{job_id=...}` on (job, instance, gpu) as the shipped rules join
  (instance is the exporter; gpu its index there) with `group_left (job_id, user)` to name the job.
  The job side is `last_over_time(...[step])`: a bucket is in the answer when the job held the GPU in it.
  The bare selector would keep the GPUs for 5 minutes (the lookback) after the job, since backfilled
  data has no staleness markers, and with them (a live scrape) would drop the job's last partial bucket.
- hottest now: `topk(10, gpuscope_gpu_temperature_celsius)` at the last sample.
- one GPU over the day at 1 minute (a node or GPU page): `avg_over_time(...{uuid="..."}[1m])`, and from
  the heatmap's per-GPU rule (an operator's rule for minute utilisation serves both), `rule{uuid="..."}`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from gpuscope.bench import prometheus_answers as answers
from gpuscope.bench.prometheus_http import RUNS, Timed, query, query_range
from gpuscope.bench.prometheus_rules import GPU_UTILIZATION, INTERVAL_S, RACK_POWER
from gpuscope.bench.prometheus_series import JOB_INFO, exposed
from gpuscope.bench.telemetry import JobSpan, Telemetry
from gpuscope.bench.timing import p95

HEATMAP_MINUTES = 360
HOTTEST = 10
Result = list[dict[str, Any]]


@dataclass(frozen=True)
class Query:
    expr: str
    end: float  # for an instant query, its time
    start: float | None = None  # None: an instant query
    step: float = 0.0

    def run(self, port: int, runs: int = RUNS) -> Timed:
        if self.start is None:
            return query(port, self.expr, self.end, runs)
        return query_range(port, self.expr, self.start, self.end, self.step, runs)

    def times(self) -> np.ndarray:
        assert self.start is not None
        return self.start + np.arange(round((self.end - self.start) / self.step) + 1) * self.step


@dataclass(frozen=True)
class Question:
    name: str
    variant: str  # "raw" or "rules"
    queries: tuple[Query, ...]
    check: Callable[[list[Result]], list[str]]  # the problems with the answers (one per query); [] if right


@dataclass(frozen=True)
class Answer:
    name: str
    variant: str
    p50_ms: float
    p95_ms: float
    series: int
    points: int
    problems: tuple[str, ...]  # empty: the answer matched the telemetry

    @property
    def ok(self) -> bool:
        return not self.problems


def ask(port: int, question: Question, runs: int = RUNS) -> Answer:
    """Each query warmed once and run `runs` times; a run of a two-query question is both, one after the other."""
    timed = [q.run(port, runs) for q in question.queries]
    per_run = [sum(times) for times in zip(*(t.times_ms for t in timed), strict=True)]
    results = [t.result for t in timed]
    points = sum(len(s.get("values", [s.get("value")])) for result in results for s in result)
    return Answer(
        question.name,
        question.variant,
        round(statistics.median(per_run), 1),
        round(p95(per_run), 1),  # the same percentile as gpuscope's side (bench/timing.py)
        sum(len(result) for result in results),
        points,
        tuple(question.check(results)),
    )


def buckets(first: float, last: float, step_s: int) -> tuple[float, float]:
    """(start, end) of a range query evaluated 1 s before the end of each step-aligned bucket from the one
    holding `first` to the one holding `last`."""
    return (first // step_s) * step_s + step_s - 1, (last // step_s) * step_s + step_s - 1


def heatmap(telemetry: Telemetry) -> Question:
    start, end = buckets(telemetry.end - (HEATMAP_MINUTES - 1) * 60, telemetry.end, 60)
    q = Query(f"avg_over_time({exposed('util_pct').name}[1m])", end, start, 60)
    windows = np.column_stack([q.times() - 60, q.times()])
    return Question("heatmap", "raw", (q,), partial(_check_gpus, telemetry, q, "util_pct", windows))


def heatmap_from_rules(telemetry: Telemetry, evaluations: np.ndarray) -> Question:
    """`evaluations`: prometheus_rules.rule_evaluations(); each point is the latest rule sample."""
    start, end = buckets(telemetry.end - (HEATMAP_MINUTES - 1) * 60, telemetry.end, 60)
    q = Query(GPU_UTILIZATION, end, start, 60)
    latest = answers.latest_before(evaluations, q.times())
    windows = np.column_stack([latest - INTERVAL_S, latest])
    return Question("heatmap", "rules", (q,), partial(_check_gpus, telemetry, q, "util_pct", windows))


def rack_power(telemetry: Telemetry, step_s: int) -> Question:
    start, end = buckets(telemetry.start, telemetry.end, step_s)
    q = Query(f"sum by (cluster, rack) (avg_over_time({exposed('power_w').name}[{step_s}s]))", end, start, step_s)
    return Question("rack_power", "raw", (q,), partial(_check_racks, telemetry, q, step_s, None))


def rack_power_from_rules(telemetry: Telemetry, step_s: int, evaluations: np.ndarray) -> Question:
    """The mean of the bucket's per-minute rule samples: `[step - 1s]` holds step / 60 of them, as the
    evaluations are a minute apart (a whole `[step]` could hold one more). Needs a step of whole minutes."""
    if step_s % INTERVAL_S:
        raise ValueError(f"rules hold one value per {INTERVAL_S} s: a step of {step_s} s cannot be built from them")
    start, end = buckets(telemetry.start, telemetry.end, step_s)
    q = Query(f"avg_over_time({RACK_POWER}[{step_s - 1}s])", end, start, step_s)
    return Question("rack_power", "rules", (q,), partial(_check_racks, telemetry, q, step_s - 1, evaluations))


def job_panel(telemetry: Telemetry, job: JobSpan, step_s: int) -> Question:
    if step_s % telemetry.step_s:
        raise ValueError(f"the step ({step_s} s) must be a multiple of the samples' {telemetry.step_s} s")
    first = telemetry.start + job.first_step * telemetry.step_s
    start, end = buckets(first, telemetry.start + (job.end_step - 1) * telemetry.step_s, step_s)
    held = f'last_over_time({JOB_INFO}{{job_id="{job.job_id}"}}[{step_s}s])'
    queries = tuple(
        Query(
            f"avg_over_time({exposed(key).name}[{step_s}s]) * on (job, instance, gpu) group_left (job_id, user) {held}",
            end,
            start,
            step_s,
        )
        for key in ("util_pct", "power_w")
    )
    return Question("job", "raw", queries, partial(_check_job, telemetry, job, queries))


def page_gpu(telemetry: Telemetry) -> int:
    """The GPU whose page is asked for (its position): one in the middle of the fleet."""
    return len(telemetry.gpus) // 2


def one_gpu(telemetry: Telemetry) -> Question:
    gpu = page_gpu(telemetry)
    start, end = buckets(telemetry.start, telemetry.end, 60)
    selector = f'{exposed("util_pct").name}{{uuid="{telemetry.gpus[gpu].uuid}"}}'
    q = Query(f"avg_over_time({selector}[1m])", end, start, 60)
    windows = np.column_stack([q.times() - 60, q.times()])
    return Question("one_gpu", "raw", (q,), partial(_check_gpus, telemetry, q, "util_pct", windows, gpus=[gpu]))


def one_gpu_from_rules(telemetry: Telemetry, evaluations: np.ndarray) -> Question:
    """From the heatmap's rule: each point is the rule's latest sample, as in heatmap_from_rules()."""
    gpu = page_gpu(telemetry)
    start, end = buckets(telemetry.start, telemetry.end, 60)
    q = Query(f'{GPU_UTILIZATION}{{uuid="{telemetry.gpus[gpu].uuid}"}}', end, start, 60)
    latest = answers.latest_before(evaluations, q.times())
    windows = np.column_stack([latest - INTERVAL_S, latest])
    return Question("one_gpu", "rules", (q,), partial(_check_gpus, telemetry, q, "util_pct", windows, gpus=[gpu]))


def hottest(telemetry: Telemetry) -> Question:
    q = Query(f"topk({HOTTEST}, {exposed('temp_c').name})", telemetry.end)
    return Question("hottest", "raw", (q,), lambda results: answers.check_hottest(telemetry, results[0], HOTTEST))


def all_questions(
    telemetry: Telemetry,
    step_s: int,
    job: JobSpan,
    evaluations: np.ndarray | None = None,
    job_step_s: int | None = None,
) -> list[Question]:
    """The five raw (the job's at `job_step_s`, default `step_s`); with `evaluations` (recording rules
    backfilled: prometheus_rules.rule_evaluations), the heatmap, rack power and one GPU from the rules as
    well (variant "rules")."""
    raw = [
        heatmap(telemetry),
        rack_power(telemetry, step_s),
        job_panel(telemetry, job, job_step_s or step_s),
        hottest(telemetry),
        one_gpu(telemetry),
    ]
    if evaluations is None:
        return raw
    return [
        *raw,
        heatmap_from_rules(telemetry, evaluations),
        rack_power_from_rules(telemetry, step_s, evaluations),
        one_gpu_from_rules(telemetry, evaluations),
    ]


def _check_gpus(
    telemetry: Telemetry,
    q: Query,
    key: str,
    windows: np.ndarray,
    results: list[Result],
    *,
    gpus: list[int] | None = None,
) -> list[str]:
    """Every GPU's (or those at `gpus`) mean over each window, against the answer's series."""
    expected = answers.per_gpu(telemetry, answers.window_means(telemetry, key, windows, gpus), gpus)
    return answers.compare(results[0], answers.by_uuid, expected, q.times())


def _check_racks(
    telemetry: Telemetry, q: Query, window: float, evaluations: np.ndarray | None, results: list[Result]
) -> list[str]:
    """Raw: each GPU's mean over [t - window, t]. Rules: the mean of the rule's minute means (each over the
    minute before its evaluation) evaluated inside [t - window, t]."""
    t = q.times()
    if evaluations is None:
        per_gpu = answers.window_means(telemetry, "power_w", np.column_stack([t - window, t]))
    else:
        minutes = answers.window_means(telemetry, "power_w", np.column_stack([evaluations - INTERVAL_S, evaluations]))
        inside = (evaluations[None, :] >= t[:, None] - window) & (evaluations[None, :] <= t[:, None])
        with np.errstate(invalid="ignore"):
            per_gpu = (inside.astype(float) @ minutes) / inside.sum(axis=1)[:, None]
    racks, sums = answers.rack_sums(telemetry, per_gpu)
    return answers.compare(results[0], answers.by_rack, {rack: sums[:, i] for i, rack in enumerate(racks)}, t)


def _check_job(telemetry: Telemetry, job: JobSpan, queries: tuple[Query, ...], results: list[Result]) -> list[str]:
    problems = []
    for key, q, result in zip(("util_pct", "power_w"), queries, results, strict=True):
        windows = np.column_stack([q.times() - q.step, q.times()])
        means = answers.window_means(telemetry, key, windows, job.gpus)
        means[~answers.job_held(telemetry, job, windows)] = math.nan
        problems += [
            f"{key}: {p}"
            for p in answers.compare(result, answers.by_uuid, answers.per_gpu(telemetry, means, job.gpus), q.times())
        ]
        named = {(s["metric"].get("job_id"), s["metric"].get("user")) for s in result}
        if named != {(job.job_id, job.user)}:
            problems.append(f"{key}: series name jobs {sorted(named, key=str)}, not only {job.job_id}")
    return problems
