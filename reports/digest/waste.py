"""Who held GPUs idle last week: per user, the GPU-hours their jobs held idle (idle runs of half an hour
and more: collector/store/usage.py) and their jobs that did, above the site's thresholds."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import Connection

from gpuscope.collector.query.jobstats import job_report
from gpuscope.collector.query.usage import Rates, UsageReport, UsageRow
from gpuscope.reports.digest.settings import EmailSettings

MAX_JOBS_LISTED = 10  # per email: the jobs with the most idle GPU-hours; the rest are counted
IDLE_GPU_MIN_HOURS = 0.05  # a GPU of a job counts as idle from 3 minutes of idle runs on


@dataclass(frozen=True)
class JobWaste:
    job: str
    partition: str | None
    gpu_hours_allocated: float  # in the week
    gpu_hours_idle: float
    gpus: int | None  # GPUs the job held over its life (None: its allocations are no longer stored)
    idle_gpus: int | None  # of which held idle
    idle_hours: tuple[float, float] | None  # the shortest and longest idle time of those GPUs


@dataclass(frozen=True)
class UserWaste:
    user: str
    gpu_hours_allocated: float
    gpu_hours_idle: float
    jobs: tuple[JobWaste, ...]  # the most idle first, at most MAX_JOBS_LISTED
    more_jobs: int  # idle jobs not listed


def wasteful_users(by_job: UsageReport, settings: EmailSettings) -> list[tuple[str, list[UsageRow]]]:
    """The users over both thresholds (idle GPU-hours and idle share of allocated), with their jobs of
    the week; the most idle GPU-hours first. Jobs without a user are nobody's to write to."""
    jobs: dict[str, list[UsageRow]] = defaultdict(list)
    for row in by_job.rows:
        if row.user is not None:
            jobs[row.user].append(row)
    found = []
    for user, rows in jobs.items():
        idle = sum(r.figures.gpu_hours_idle for r in rows)
        allocated = sum(r.figures.gpu_hours_allocated for r in rows)
        if idle > 0 and idle >= settings.min_idle_gpu_hours and idle >= settings.min_idle_share * allocated:
            found.append((idle, user, rows))
    found.sort(key=lambda item: (-item[0], item[1]))
    return [(user, rows) for _, user, rows in found]


def user_waste(conn: Connection[Any], user: str, rows: list[UsageRow], rates: Rates, now: datetime) -> UserWaste:
    """The user's idle jobs, each with its GPUs from the job's report (which covers the job's whole life)."""
    idle_rows = sorted((r for r in rows if r.figures.gpu_hours_idle > 0), key=lambda r: -r.figures.gpu_hours_idle)
    listed = [_job(conn, row, rates, now) for row in idle_rows[:MAX_JOBS_LISTED]]
    return UserWaste(
        user=user,
        gpu_hours_allocated=sum(r.figures.gpu_hours_allocated for r in rows),
        gpu_hours_idle=sum(r.figures.gpu_hours_idle for r in rows),
        jobs=tuple(listed),
        more_jobs=max(len(idle_rows) - MAX_JOBS_LISTED, 0),
    )


def _job(conn: Connection[Any], row: UsageRow, rates: Rates, now: datetime) -> JobWaste:
    figures, job = row.figures, row.key or ""
    report = job_report(conn, job, rates, now) if job else None
    gpus = idle_gpus = None
    spread = None
    if report is not None and report.per_gpu:
        idle = [g.idle_hours for g in report.per_gpu if g.idle_hours >= IDLE_GPU_MIN_HOURS]
        gpus, idle_gpus = len(report.per_gpu), len(idle)
        spread = (min(idle), max(idle)) if idle else None
    return JobWaste(job, row.partition, figures.gpu_hours_allocated, figures.gpu_hours_idle, gpus, idle_gpus, spread)
