"""Jobs (running and finished) with their GPUs and how well they used them.

Efficiency is the mean utilisation, SM activity, tensor activity and power over the samples of each
allocation, read from the hour rollup for its whole settled hours and the minute rollup for the rest:
a week-long job costs hours of rows, not minutes. Minutes not yet rolled up (the last two or three)
are not counted.

An allocation of a MIG device reads its GPU instance's own samples (mig_sample: SM and tensor activity;
NVML has no utilisation in MIG mode, and power belongs to the whole board, shared), and counts for its
share of the GPU's slices in GPU-hours: a 1g slice of an H100 for an hour is 1/7 of a GPU-hour.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from psycopg import Connection

from gpuscope.collector.query.cells import rollup_splits
from gpuscope.collector.query.inventory import GpuRow
from gpuscope.collector.query.timerange import TimeRange

JobState = Literal["running", "finished", "all"]
MEANS = ("util", "sm_active", "tensor", "power")


@dataclass(frozen=True)
class Usage:
    mean_util_pct: float | None
    mean_sm_active_pct: float | None
    mean_tensor_active_pct: float | None
    mean_power_w: float | None


@dataclass(frozen=True)
class JobRow:
    job_id: str
    user: str | None
    running: bool
    started_at: datetime
    ended_at: datetime | None  # None while running
    last_seen: datetime
    nodes: list[str]
    gpus: int
    gpu_hours: float
    usage: Usage
    namespace: str | None = None  # Kubernetes: the job's namespace, workload ("JobSet/train-7") and pods
    workload: str | None = None
    pods: list[str] | None = None
    mig_devices: int = 0  # MIG devices among its allocations (their GPUs count in `gpus`)
    account: str | None = None  # Slurm: the job's account and partition (the prolog's file)
    partition: str | None = None


@dataclass(frozen=True)
class MigRow:
    """The MIG device an allocation held, in its parent GPU."""

    uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    profile: str
    slices: int
    gpu_slices: int


@dataclass(frozen=True)
class JobGpu:
    gpu: GpuRow
    started_at: datetime
    ended_at: datetime | None
    usage: Usage
    pod: str | None = None  # Kubernetes: the pod and container that held the GPU
    container: str | None = None
    mig: MigRow | None = None  # None: the whole GPU


def _with_usage(picked: str, select: str) -> str:
    """`select` over the CTEs `alloc` (the picked jobs' allocations with their hour window and their share
    of a GPU) and `per_alloc` (sums and counts per allocation); `picked` is a CTE body yielding job_id.
    Only the constants below go in: values travel as parameters."""
    columns = ", ".join(f"r.{m}_sum, r.{m}_n" for m in MEANS)
    sums = ", ".join(f"sum({m}_sum) AS {m}_sum, sum({m}_n) AS {m}_n" for m in MEANS)
    return (
        f"WITH picked AS ({picked}),"  # noqa: S608
        " alloc AS (SELECT a.*, coalesce(a.ended_at, now()) AS hi,"
        "   date_trunc('hour', a.started_at + interval '1 hour' - interval '1 microsecond') AS h_lo,"
        "   least(date_trunc('hour', coalesce(a.ended_at, now())), %(hour_split)s) AS h_hi,"
        "   coalesce(d.slices::float8 / d.gpu_slices, 1) AS share"
        "   FROM job_allocation a LEFT JOIN mig_device d USING (mig_id)"
        "   WHERE a.job_id IN (SELECT job_id FROM picked)),"
        f" usage AS (SELECT a.allocation_id, {columns} FROM alloc a JOIN gpu_rollup_1h r"
        "   ON r.gpu_id = a.gpu_id AND r.bucket >= a.h_lo AND r.bucket < a.h_hi WHERE a.mig_id IS NULL"
        # The minutes of [started_at, hi) outside the hours [h_lo, h_hi), as two plain ranges of the
        # primary key (before h_lo; from h_hi, or from h_lo where the job spans no whole hour): written
        # as one range with an OR, the planner combined the key with a scan of the BRIN bucket index
        # for every allocation, several times the cost of the rows read.
        f"  UNION ALL SELECT a.allocation_id, {columns} FROM alloc a JOIN gpu_rollup_1m r"
        "   ON r.gpu_id = a.gpu_id AND r.bucket >= a.started_at AND r.bucket < least(a.hi, a.h_lo)"
        "   WHERE a.mig_id IS NULL"
        f"  UNION ALL SELECT a.allocation_id, {columns} FROM alloc a JOIN gpu_rollup_1m r"
        "   ON r.gpu_id = a.gpu_id AND r.bucket >= greatest(a.started_at, a.h_lo, a.h_hi) AND r.bucket < a.hi"
        "   WHERE a.mig_id IS NULL"
        f"  UNION ALL {MIG_USAGE}),"
        f" per_alloc AS (SELECT allocation_id, {sums} FROM usage GROUP BY 1) {select}"
    )


# A MIG device's usage: its GPU instance's rows over the allocation (a compute instance shares them with
# the others of its GPU instance, which report them on the first), read raw: MIG rows are few.
MIG_USAGE = (
    "SELECT a.allocation_id, NULL::float8, 0::bigint,"
    " sum(s.sm_active_pct)::float8, count(s.sm_active_pct), sum(s.tensor_active_pct)::float8,"
    " count(s.tensor_active_pct), NULL::float8, 0::bigint"
    " FROM alloc a JOIN mig_device d ON d.mig_id = a.mig_id"
    " JOIN mig_device same ON same.gpu_id = d.gpu_id AND same.gpu_instance_id = d.gpu_instance_id"
    " JOIN mig_sample s ON s.mig_id = same.mig_id AND s.ts >= a.started_at AND s.ts < a.hi"
    " GROUP BY a.allocation_id"
)


MEANS_SQL = ", ".join(f"(sum(p.{m}_sum) / nullif(sum(p.{m}_n), 0))::float8" for m in MEANS)
SUMMARY_SELECT = (
    "SELECT a.job_id, min(a.username), bool_or(a.ended_at IS NULL), min(a.started_at),"  # noqa: S608 (constants)
    " CASE WHEN bool_or(a.ended_at IS NULL) THEN NULL ELSE max(a.ended_at) END, max(a.last_seen),"
    " array_agg(DISTINCT n.name ORDER BY n.name), count(DISTINCT a.gpu_id),"
    f" (sum(extract(epoch FROM a.hi - a.started_at) * a.share) / 3600)::float8, {MEANS_SQL},"
    " min(a.namespace), min(a.workload),"
    " array_remove(array_agg(DISTINCT a.pod ORDER BY a.pod), NULL), count(DISTINCT a.mig_id),"
    " min(a.account), min(a.partition)"
    " FROM alloc a JOIN node n USING (node_id) LEFT JOIN per_alloc p USING (allocation_id)"
    " GROUP BY a.job_id ORDER BY bool_or(a.ended_at IS NULL) DESC, max(coalesce(a.ended_at, a.last_seen)) DESC,"
    " a.job_id"
)
JOBS_SQL = _with_usage(
    "SELECT job_id FROM job_allocation WHERE started_at < %(end)s AND coalesce(ended_at, 'infinity') >= %(start)s"
    " AND (%(user)s::text IS NULL OR username = %(user)s)"
    " AND (%(namespace)s::text IS NULL OR namespace = %(namespace)s) GROUP BY job_id"
    " HAVING %(state)s = 'all' OR (%(state)s = 'running') = bool_or(ended_at IS NULL)"
    " ORDER BY bool_or(ended_at IS NULL) DESC, max(coalesce(ended_at, last_seen)) DESC, job_id LIMIT %(limit)s",
    SUMMARY_SELECT,
)
ONE_JOB_SQL = _with_usage("SELECT %(job)s::text AS job_id", SUMMARY_SELECT)
JOB_GPUS_SQL = _with_usage(
    "SELECT %(job)s::text AS job_id",
    "SELECT g.gpu_id, n.cluster, n.rack, n.name, g.gpu_index, g.uuid, a.started_at, a.ended_at,"  # noqa: S608
    f" {MEANS_SQL}, a.pod, a.container,"
    " d.uuid, d.gpu_instance_id, d.compute_instance_id, d.profile, d.slices, d.gpu_slices"
    " FROM alloc a JOIN gpu g USING (gpu_id) JOIN node n ON n.node_id = a.node_id"
    " LEFT JOIN mig_device d ON d.mig_id = a.mig_id LEFT JOIN per_alloc p USING (allocation_id)"
    " GROUP BY a.allocation_id, g.gpu_id, n.cluster, n.rack, n.name, g.gpu_index, g.uuid, a.started_at, a.ended_at,"
    " a.pod, a.container, d.mig_id"
    " ORDER BY n.cluster, n.rack, n.name, g.gpu_index, d.gpu_instance_id NULLS FIRST, d.compute_instance_id,"
    " a.started_at",
)


def jobs(
    conn: Connection[Any],
    time_range: TimeRange,
    state: JobState = "all",
    user: str | None = None,
    limit: int = 500,
    namespace: str | None = None,
) -> list[JobRow]:
    """Jobs that held GPUs at some point in the range: running first, then the most recently active."""
    params = {
        "start": time_range.start,
        "end": time_range.end,
        "user": user,
        "namespace": namespace,
        "state": state,
        "limit": limit,
        "hour_split": rollup_splits(conn).hour,
    }
    return [_job_row(row) for row in conn.execute(JOBS_SQL, params).fetchall()]


def job(conn: Connection[Any], job_id: str) -> JobRow | None:
    row = conn.execute(ONE_JOB_SQL, {"job": job_id, "hour_split": rollup_splits(conn).hour}).fetchone()
    return _job_row(row) if row else None


def job_gpus(conn: Connection[Any], job_id: str) -> list[JobGpu]:
    """Each GPU the job held (one entry per allocation), with its own usage: the per-rank view."""
    rows = conn.execute(JOB_GPUS_SQL, {"job": job_id, "hour_split": rollup_splits(conn).hour}).fetchall()
    return [
        JobGpu(
            GpuRow(*row[:6]),
            row[6],
            row[7],
            Usage(*row[8:12]),
            row[12],
            row[13],
            MigRow(*row[14:20]) if row[14] is not None else None,
        )
        for row in rows
    ]


def _job_row(row: tuple[Any, ...]) -> JobRow:
    return JobRow(
        job_id=row[0],
        user=row[1],
        running=row[2],
        started_at=row[3],
        ended_at=row[4],
        last_seen=row[5],
        nodes=row[6],
        gpus=row[7],
        gpu_hours=row[8],
        usage=Usage(*row[9:13]),
        namespace=row[13],
        workload=row[14],
        pods=row[15] or None,
        mig_devices=row[16],
        account=row[17],
        partition=row[18],
    )
