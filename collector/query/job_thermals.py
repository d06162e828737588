"""Each of a job's GPUs' temperature (mean and hottest) and SM clock (mean) over its allocation: the
per-rank view's heat and speed, beside the usage means of jobs.py. Read as jobs.py reads those: the hour
rollup for the allocation's whole settled hours, the minute rollup for the rest (minutes not yet rolled
up are not counted). A MIG device reads its GPU's: the board's heat and clock are its slices' too."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import Connection

from gpuscope.collector.query.cells import rollup_splits

_COLUMNS = "r.temp_sum, r.temp_n, r.temp_max, r.sm_clock_sum, r.sm_clock_n"
# The hours [h_lo, h_hi) from the hour rollup, the minutes outside them from the minute rollup (as
# jobs.py splits them: two plain key ranges, not one range with an OR).
_SQL = (
    "WITH alloc AS (SELECT a.gpu_id, a.started_at, coalesce(a.ended_at, now()) AS hi,"  # noqa: S608 (constants)
    "   date_trunc('hour', a.started_at + interval '1 hour' - interval '1 microsecond') AS h_lo,"
    "   least(date_trunc('hour', coalesce(a.ended_at, now())), %(hour_split)s) AS h_hi"
    "   FROM job_allocation a WHERE a.job_id = %(job)s),"
    f" rows AS (SELECT a.gpu_id, a.started_at, {_COLUMNS} FROM alloc a JOIN gpu_rollup_1h r"
    "   ON r.gpu_id = a.gpu_id AND r.bucket >= a.h_lo AND r.bucket < a.h_hi"
    f"  UNION ALL SELECT a.gpu_id, a.started_at, {_COLUMNS} FROM alloc a JOIN gpu_rollup_1m r"
    "   ON r.gpu_id = a.gpu_id AND r.bucket >= a.started_at AND r.bucket < least(a.hi, a.h_lo)"
    f"  UNION ALL SELECT a.gpu_id, a.started_at, {_COLUMNS} FROM alloc a JOIN gpu_rollup_1m r"
    "   ON r.gpu_id = a.gpu_id AND r.bucket >= greatest(a.started_at, a.h_lo, a.h_hi) AND r.bucket < a.hi)"
    " SELECT gpu_id, started_at, (sum(temp_sum) / nullif(sum(temp_n), 0))::float8, max(temp_max)::float8,"
    "   (sum(sm_clock_sum) / nullif(sum(sm_clock_n), 0))::float8"
    " FROM rows GROUP BY gpu_id, started_at"
)


@dataclass(frozen=True)
class Thermals:
    mean_temp_c: float | None  # None: the GPU reported no temperature while held
    max_temp_c: float | None
    mean_sm_clock_mhz: float | None


def job_thermals(conn: Connection[Any], job_id: str) -> dict[tuple[int, datetime], Thermals]:
    """(GPU id, allocation start) -> its thermals, for each allocation with rolled-up minutes."""
    rows = conn.execute(_SQL, {"job": job_id, "hour_split": rollup_splits(conn).hour}).fetchall()
    return {(gpu_id, started): Thermals(*values) for gpu_id, started, *values in rows}
