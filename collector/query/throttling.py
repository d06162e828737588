"""What holds a node's GPUs back, bucket by bucket: the clock event reasons each reported and its
temperature, read from raw samples. The reasons are NVML bit masks: a bucket keeps every bit any of its
samples set (bit_or), since a mean of masks names reasons no sample gave."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from psycopg import Connection

from gpuscope.collector.query.timerange import EPOCH, TimeRange


@dataclass(frozen=True)
class Throttling:
    """One GPU's buckets that hold samples, oldest first (a bucket without one is left out)."""

    times: list[datetime]  # bucket starts
    reasons: list[int | None]  # every clock event reason set in the bucket; None: none reported
    temp_c: list[float | None]  # mean temperature; None: none reported


_SQL = (
    "SELECT gpu_id, date_bin(%(bucket)s, ts, %(origin)s) AS b, bit_or(clock_event_reasons), avg(temp_c)::float8"
    " FROM gpu_sample WHERE gpu_id = ANY(%(gpus)s) AND ts >= %(start)s AND ts < %(end)s"
    " GROUP BY 1, 2 ORDER BY 1, 2"
)


def throttling(
    conn: Connection[Any], gpu_ids: list[int], time_range: TimeRange, bucket_s: int
) -> dict[int, Throttling]:
    """GPU id -> its buckets; a GPU with no sample in the range is left out. The first bucket is read
    whole, from its aligned start, like the charts' (collector/query/cells.py)."""
    buckets = time_range.buckets(bucket_s)
    if not gpu_ids or not buckets:
        return {}
    params = {
        "bucket": timedelta(seconds=bucket_s),
        "origin": EPOCH,
        "gpus": gpu_ids,
        "start": buckets[0],
        "end": time_range.end,
    }
    found: dict[int, Throttling] = {}
    for gpu_id, start, reasons, temp in conn.execute(_SQL, params).fetchall():
        gpu = found.setdefault(gpu_id, Throttling([], [], []))
        gpu.times.append(start)
        gpu.reasons.append(None if reasons is None else int(reasons))
        gpu.temp_c.append(temp)
    return found
