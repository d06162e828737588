"""Per-GPU, per-bucket means of one metric: from the one-minute rollup where it is settled, from raw
samples elsewhere. Shared by the heatmap and the rack power queries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from psycopg import Connection, sql

from collector.query.timerange import EPOCH, TimeRange
from collector.store.rollups import ROLLED, SETTLE

RAW_TO_ROLLED = {raw: rolled for rolled, raw in ROLLED.items()}


def rollup_split(conn: Connection[Any], now: datetime | None = None) -> datetime:
    """Minutes before this are in the rollup: settled, and no older minute still waits to be rolled up."""
    settled = (now or datetime.now(UTC)) - SETTLE - timedelta(minutes=1)
    row = conn.execute("SELECT min(bucket) FROM rollup_dirty_minute").fetchone()
    oldest_dirty = row[0] if row and row[0] is not None else settled
    split = min(settled, oldest_dirty)
    return split.replace(second=0, microsecond=0)


def cells_query(metric: str, time_range: TimeRange, bucket_s: int, split: datetime | None) -> tuple[sql.Composed, dict]:
    """SQL returning (gpu_id, bucket, mean) rows. `split`: where raw takes over from the rollup
    (None: raw only, e.g. for buckets finer than a minute or metrics without a rollup)."""
    params = {"bucket": timedelta(seconds=bucket_s), "origin": EPOCH, "start": time_range.start, "end": time_range.end}
    raw = sql.SQL(
        "SELECT gpu_id, date_bin(%(bucket)s, ts, %(origin)s) AS b, {m}::float8 AS s,"
        " CASE WHEN {m} IS NULL THEN 0 ELSE 1 END AS n FROM gpu_sample WHERE ts >= {lo} AND ts < %(end)s"
    )
    if split is None or metric not in RAW_TO_ROLLED or bucket_s % 60:
        query = sql.SQL("SELECT gpu_id, b, avg(s) FROM ({raw}) AS cells GROUP BY 1, 2").format(
            raw=raw.format(m=sql.Identifier(metric), lo=sql.SQL("%(start)s"))
        )
        return query, params
    rolled = RAW_TO_ROLLED[metric]
    params["split"] = max(split, time_range.start)
    pieces = {
        "rs": sql.Identifier(f"{rolled}_sum"),
        "rn": sql.Identifier(f"{rolled}_n"),
        "raw": raw.format(m=sql.Identifier(metric), lo=sql.SQL("%(split)s")),
        "settled": sql.SQL(
            "gpu_rollup_1m WHERE bucket >= date_bin('1 minute', %(start)s::timestamptz, %(origin)s)"
            " AND bucket < %(split)s"
        ),
    }
    if bucket_s == 60:
        # Rollup minutes are the buckets already, and the two parts cover different minutes (split is
        # on a minute): no regrouping of the rollup's rows, which are most of them.
        template = (
            "SELECT gpu_id, bucket, {rs} / nullif({rn}, 0) FROM {settled}"
            " UNION ALL SELECT gpu_id, b, avg(s) FROM ({raw}) AS recent GROUP BY 1, 2"
        )
    else:
        template = (
            "SELECT gpu_id, b, sum(s) / nullif(sum(n), 0) FROM ("
            " SELECT gpu_id, date_bin(%(bucket)s, bucket, %(origin)s) AS b, {rs} AS s, {rn} AS n FROM {settled}"
            " UNION ALL {raw}) AS cells GROUP BY 1, 2"
        )
    return sql.SQL(template).format(**pieces), params


def fetch_by_gpu(conn: Connection[Any], cells: sql.Composed, params: dict) -> dict[int, tuple[np.ndarray, np.ndarray]]:
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
