"""Keeps job_allocation in step with what exporters report, inside the batch's transaction.

For each GPU, the batch's rows (in time order) form runs of the same job. The first run continues the
GPU's open allocation if it is the same job; any change of job closes the open allocation at the
first sample showing the change and opens the next one. Batches can arrive late or twice: rows older
than an allocation's last_seen never reopen or shorten it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from psycopg import AsyncConnection

from gpuscope.collector.store.batch import Batch

# An exporter silent this long no longer vouches for its allocations: they end at their last sighting.
STALE_AFTER = timedelta(minutes=5)


async def record(conn: AsyncConnection[Any], node_id: int, gpu_ids: dict[int, int], batch: Batch) -> None:
    samples = batch.gpu_samples
    if samples.job is None or len(samples) == 0:
        return
    for index, gpu_id in gpu_ids.items():
        rows = np.flatnonzero(samples.device == index)
        if rows.size == 0:
            continue
        rows = rows[np.argsort(samples.ts[rows], kind="stable")]
        ts, jobs = samples.ts[rows], samples.job[rows]
        starts = np.flatnonzero(np.r_[True, jobs[1:] != jobs[:-1]])
        for n, start in enumerate(starts.tolist()):
            end = starts[n + 1] if n + 1 < len(starts) else len(jobs)
            job = int(jobs[start])
            await _apply_run(
                conn, node_id, gpu_id, batch.jobs[job] if job >= 0 else None, _at(ts[start]), _at(ts[end - 1])
            )


async def _apply_run(
    conn: AsyncConnection[Any], node_id: int, gpu_id: int, job: Any, first: datetime, last: datetime
) -> None:
    cur = await conn.execute(
        "SELECT allocation_id, job_id, last_seen FROM job_allocation WHERE gpu_id = %s AND ended_at IS NULL FOR UPDATE",
        (gpu_id,),
    )
    open_row = await cur.fetchone()
    if open_row is not None and last <= open_row[2]:
        return  # old news: a late or repeated batch
    if open_row is not None and job is not None and open_row[1] == job.job_id:
        await conn.execute("UPDATE job_allocation SET last_seen = %s WHERE allocation_id = %s", (last, open_row[0]))
        return
    if open_row is not None:
        await conn.execute(
            "UPDATE job_allocation SET ended_at = greatest(%s, started_at) WHERE allocation_id = %s",
            (first, open_row[0]),
        )
    if job is not None:
        await conn.execute(
            "INSERT INTO job_allocation (job_id, username, node_id, gpu_id, started_at, last_seen)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (job.job_id, job.user, node_id, gpu_id, first, last),
        )


async def expire_stale(conn: AsyncConnection[Any], now: datetime | None = None) -> int:
    """Close open allocations whose GPU has not been reported for STALE_AFTER; returns how many."""
    cur = await conn.execute(
        "UPDATE job_allocation SET ended_at = last_seen WHERE ended_at IS NULL AND last_seen < %s",
        ((now or datetime.now(UTC)) - STALE_AFTER,),
    )
    return cur.rowcount


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(float(seconds), UTC)
