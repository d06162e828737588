"""Which job held each GPU in each time bucket: what a chart's hover names beside the value, so a dip
or a hot spot reads with the job it belongs to."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from psycopg import Connection

_SQL = (
    "SELECT p.i, a.job_id, a.username, a.started_at, a.ended_at"
    " FROM unnest(%(gpus)s::int[]) WITH ORDINALITY AS p(gpu_id, i) JOIN job_allocation a USING (gpu_id)"
    " WHERE a.started_at < %(end)s AND (a.ended_at IS NULL OR a.ended_at > %(start)s)"
    " ORDER BY a.started_at"
)


def held_by(conn: Connection[Any], gpu_ids: Sequence[int], times: Sequence[datetime], bucket_s: int) -> np.ndarray:
    """For GPUs `gpu_ids` and buckets starting at `times`: an array of shape (GPUs, times) of
    "job J (user)" where a job held the GPU in the bucket ("job A, job B" where it changed hands there),
    "" where none did."""
    out = np.full((len(gpu_ids), len(times)), "", dtype=object)
    if not gpu_ids or not times:
        return out
    width = timedelta(seconds=bucket_s)
    params = {
        "gpus": list(gpu_ids),
        "start": times[0],
        "end": times[-1] + width,
    }
    starts = np.array([t.timestamp() for t in times])
    for index, job_id, user, started, ended in conn.execute(_SQL, params):
        label = f"job {job_id}" + (f" ({user})" if user else "")
        # Buckets the allocation overlaps: it starts before the bucket ends and ends after it starts.
        first = int(np.searchsorted(starts + bucket_s, started.timestamp(), side="right"))
        last = len(times) if ended is None else int(np.searchsorted(starts, ended.timestamp(), side="left"))
        row = out[index - 1]
        for column in range(first, last):
            row[column] = label if not row[column] or row[column] == label else f"{row[column]}, {label}"
    return out
