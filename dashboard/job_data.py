"""What the jobs pages load beyond dashboard/data.py: the jobs list for a view (its user and namespace
filtered by the query) with each job's stragglers and idle GPUs, and a job's efficiency summary with its
GPUs."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg_pool import ConnectionPool

from gpuscope.collector import query
from gpuscope.collector.query.idle_gpus import IdleGpu, idle_gpus
from gpuscope.collector.query.job_thermals import Thermals, job_thermals
from gpuscope.dashboard.data import time_range
from gpuscope.dashboard.job_view import QUERY_STATES, JobsView
from gpuscope.stragglers import reads as straggler_reads

JOBS_MAX = 300  # each with its usage over its whole life: the list stays a short read


@dataclass(frozen=True)
class JobsList:
    jobs: list[query.JobRow]  # as the store orders them, JOBS_MAX at most
    stragglers: dict[str, list[straggler_reads.StragglerRow]]  # job_id -> its stragglers in the range
    owners: query.JobOwners  # everyone with jobs in the range, for the filters
    truncated: bool  # more jobs matched than were loaded
    idle: dict[str, list[IdleGpu]] = field(default_factory=dict)  # job_id -> the GPUs it holds idle now


def load_jobs_list(pool: ConnectionPool[Any], view: JobsView) -> JobsList:
    window = time_range(view.range_key)
    with pool.connection() as conn:
        jobs = query.jobs(
            conn,
            window,
            QUERY_STATES[view.state],
            user=view.user or None,
            namespace=view.namespace or None,
            limit=JOBS_MAX + 1,
        )
        found = straggler_reads.stragglers(conn, window, limit=1000)
        owners = query.job_owners(conn, window)
        running = [job.job_id for job in jobs[:JOBS_MAX] if job.running]
        idle = idle_gpus(conn, jobs=running) if running else []
    by_job: dict[str, list[straggler_reads.StragglerRow]] = {}
    for row in found:
        by_job.setdefault(row.job_id, []).append(row)
    idle_by_job: dict[str, list[IdleGpu]] = {}
    for gpu in idle:
        idle_by_job.setdefault(gpu.job_id, []).append(gpu)
    return JobsList(jobs[:JOBS_MAX], by_job, owners, len(jobs) > JOBS_MAX, idle_by_job)


@dataclass(frozen=True)
class JobEfficiencyData:
    job: query.JobRow
    efficiency: query.JobEfficiency
    gpus: list[query.JobGpu]  # one per allocation: the per-rank view
    stragglers: list[straggler_reads.StragglerRow]  # while it ran, newest first
    judged: straggler_reads.JudgingModel | None = None  # how the straggler watch judged it; None: never seen by it
    thermals: dict[tuple[int, datetime], Thermals] = field(default_factory=dict)  # (GPU id, held from) ->


def load_job_efficiency(pool: ConnectionPool[Any], job_id: str) -> JobEfficiencyData | None:
    with pool.connection() as conn:
        job = query.job(conn, job_id)
        if job is None:
            return None
        efficiency = query.job_efficiency(conn, job_id)
        gpus = query.job_gpus(conn, job_id)
        end = max(job.ended_at or datetime.now(UTC), job.started_at + timedelta(seconds=1))
        stragglers = straggler_reads.stragglers(conn, query.TimeRange(job.started_at, end), job=job_id)
        judged = straggler_reads.judging_model(conn, job_id)
        thermals = job_thermals(conn, job_id)
    if efficiency is None:  # its allocations went between the two reads (retention)
        return None
    return JobEfficiencyData(job, efficiency, gpus, stragglers, judged, thermals)


def job_known(pool: ConnectionPool[Any], job_id: str) -> bool:
    """Whether the store holds any GPU the job was given: its page has something to show."""
    with pool.connection() as conn:
        return bool(query.select_gpus(conn, job=job_id))
