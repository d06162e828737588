"""Per-GPU, per-bucket means of one metric, from the coarsest source that is exact for the bucket:
the one-hour rollup for whole settled hours, the one-minute rollup for settled minutes, raw samples for
the rest. Shared by the heatmap, series, rack power and jobs queries."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from psycopg import Connection, sql

from collector.query.timerange import EPOCH, TimeRange
from collector.store.rollups import ROLLED, SETTLE

RAW_TO_ROLLED = {raw: rolled for rolled, raw in ROLLED.items()}


@dataclass(frozen=True)
class Splits:
    """Where each rollup stops being complete: hours before `hour` are in gpu_rollup_1h, minutes
    before `minute` in gpu_rollup_1m; raw samples cover everything."""

    hour: datetime
    minute: datetime


def rollup_splits(conn: Connection[Any], now: datetime | None = None) -> Splits:
    settled = (now or datetime.now(UTC)) - SETTLE - timedelta(minutes=1)
    row = conn.execute(
        "SELECT (SELECT min(bucket) FROM rollup_dirty_minute), (SELECT min(bucket) FROM rollup_dirty_hour)"
    ).fetchone()
    oldest_minute, oldest_hour = row if row else (None, None)
    minute = min(settled, oldest_minute or settled).replace(second=0, microsecond=0)
    hour = minute.replace(minute=0)
    return Splits(hour=min(hour, oldest_hour or hour), minute=minute)


def cells_query(
    metric: str,
    time_range: TimeRange,
    bucket_s: int,
    splits: Splits | None,
    gpu_ids: Sequence[int] | None = None,
) -> tuple[sql.Composed, dict[str, Any]]:
    """SQL returning (gpu_id, bucket, mean) rows. `splits` None: raw samples only. `gpu_ids`: only these."""
    params: dict[str, Any] = {
        "bucket": timedelta(seconds=bucket_s),
        "origin": EPOCH,
        "start": time_range.start,
        "end": time_range.end,
        "gpus": list(gpu_ids or []),
    }
    only = sql.SQL(" AND gpu_id = ANY(%(gpus)s)" if gpu_ids is not None else "")
    m = sql.Identifier(metric)
    raw = sql.SQL(
        "SELECT gpu_id, date_bin(%(bucket)s, ts, %(origin)s) AS b, {m}::float8 AS s,"
        " CASE WHEN {m} IS NULL THEN 0 ELSE 1 END AS n FROM gpu_sample"
        " WHERE ts >= %(raw_lo)s AND ts < %(end)s{only}"
    ).format(m=m, only=only)
    if splits is None or metric not in RAW_TO_ROLLED or bucket_s % 60:
        params["raw_lo"] = time_range.start
        return sql.SQL("SELECT gpu_id, b, avg(s) FROM ({raw}) AS cells GROUP BY 1, 2").format(raw=raw), params

    rolled = RAW_TO_ROLLED[metric]
    start_minute = time_range.start.replace(second=0, microsecond=0)
    use_hours = bucket_s % 3600 == 0
    # Each tier starts where the coarser one stops, so no sample is counted twice.
    minute_lo = max(start_minute, splits.hour) if use_hours else start_minute
    params |= {
        "hour_lo": start_minute.replace(minute=0),
        "hour_hi": splits.hour,
        "minute_lo": minute_lo,
        "minute_hi": max(splits.minute, minute_lo),
        "raw_lo": max(splits.minute, time_range.start),
    }

    def rollup(table: str, lo: str, hi: str) -> sql.Composed:
        return sql.SQL("{t} WHERE bucket >= %({lo})s AND bucket < %({hi})s{only}").format(
            t=sql.Identifier(table), lo=sql.SQL(lo), hi=sql.SQL(hi), only=only
        )

    pieces = {
        "rs": sql.Identifier(f"{rolled}_sum"),
        "rn": sql.Identifier(f"{rolled}_n"),
        "raw": raw,
        "minutes": rollup("gpu_rollup_1m", "minute_lo", "minute_hi"),
        "hours": rollup("gpu_rollup_1h", "hour_lo", "hour_hi"),
    }
    if bucket_s == 60:
        # Rollup minutes are the buckets already, and the two parts cover different minutes (the split
        # is on a minute): no regrouping of the rollup's rows, which are most of them.
        template = (
            "SELECT gpu_id, bucket, {rs} / nullif({rn}, 0) FROM {minutes}"
            " UNION ALL SELECT gpu_id, b, avg(s) FROM ({raw}) AS recent GROUP BY 1, 2"
        )
    else:
        hours = " UNION ALL SELECT gpu_id, date_bin(%(bucket)s, bucket, %(origin)s), {rs}, {rn} FROM {hours}"
        # A constant template: what varies is passed through sql.Identifier and parameters.
        template = (
            "SELECT gpu_id, b, sum(s) / nullif(sum(n), 0) FROM ("  # noqa: S608
            " SELECT gpu_id, date_bin(%(bucket)s, bucket, %(origin)s) AS b, {rs} AS s, {rn} AS n FROM {minutes}"
            + (hours if use_hours else "")
            + " UNION ALL {raw}) AS cells GROUP BY 1, 2"
        )
    return sql.SQL(template).format(**pieces), params


def fetch_by_gpu(
    conn: Connection[Any], cells: sql.Composed, params: dict[str, Any]
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Run a cells query, one row per GPU with its buckets (epoch seconds) and means as arrays:
    hundreds of thousands of cells arrive as a thousand rows, without a Python object per timestamp."""
    rows = conn.execute(
        sql.SQL(
            "SELECT gpu_id, array_agg(extract(epoch FROM b)::float8), array_agg(v::float8)"
            " FROM ({}) AS cells (gpu_id, b, v) GROUP BY gpu_id"
        ).format(cells),
        params,
    ).fetchall()
    return {
        gpu_id: (np.asarray(epochs, dtype=np.float64), np.asarray(means, dtype=np.float64))
        for gpu_id, epochs, means in rows
    }
