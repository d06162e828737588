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

from gpuscope.collector.query.buckets import source_of
from gpuscope.collector.query.timerange import EPOCH, TimeRange
from gpuscope.collector.store.copy_binary import PG_EPOCH_US
from gpuscope.collector.store.rollups import ROLLED, SETTLE

RAW_TO_ROLLED = {raw: rolled for rolled, raw in ROLLED.items()}
PG_EPOCH_S = PG_EPOCH_US / 1e6  # binary timestamps count microseconds from 2000-01-01


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


def splits_for(conn: Connection[Any], bucket_s: int) -> Splits | None:
    """Where the rollups stop, for buckets of `bucket_s`; None where they read raw samples only."""
    return rollup_splits(conn) if source_of(bucket_s) != "raw" else None


def cells_query(
    metric: str,
    time_range: TimeRange,
    bucket_s: int,
    splits: Splits | None,
    gpu_ids: Sequence[int] | None = None,
    counted: bool = False,
) -> tuple[sql.Composed, dict[str, Any]]:
    """SQL returning (gpu_id, bucket, mean) rows. `splits` None: raw samples only. `gpu_ids`: only these.
    The first bucket is read whole, from its aligned start before the range's: cut at the range's start,
    it could hold no sample at all (with every GPU sampled in step, a blank first column). `counted`
    (minute buckets read from the rollup only): a fourth column, the samples behind each mean, so that
    the minutes can be widened into exact means (widen())."""
    first = time_range.first_bucket(bucket_s)
    params: dict[str, Any] = {
        "bucket": timedelta(seconds=bucket_s),
        "origin": EPOCH,
        "start": first,
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
    source = source_of(bucket_s)  # the bucket policy's tier (buckets.py); finer ones fill in after it
    if splits is None or metric not in RAW_TO_ROLLED or source == "raw":
        params["raw_lo"] = first
        statement = sql.SQL("SELECT gpu_id, b, avg(s){n} FROM ({raw}) AS cells GROUP BY 1, 2")
        return statement.format(n=sql.SQL(", sum(n)" if counted else ""), raw=raw), params

    rolled = RAW_TO_ROLLED[metric]
    start_minute = first.replace(second=0, microsecond=0)
    use_hours = source == "hour"
    # Each tier starts where the coarser one stops, so no sample is counted twice.
    minute_lo = max(start_minute, splits.hour) if use_hours else start_minute
    params |= {
        "hour_lo": start_minute.replace(minute=0),
        "hour_hi": splits.hour,
        "minute_lo": minute_lo,
        "minute_hi": max(splits.minute, minute_lo),
        "raw_lo": max(splits.minute, first),
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
            "SELECT gpu_id, bucket, {rs} / nullif({rn}, 0){rolled_n} FROM {minutes}"
            " UNION ALL SELECT gpu_id, b, avg(s){raw_n} FROM ({raw}) AS recent GROUP BY 1, 2"
        )
        pieces["rolled_n"] = sql.SQL(", {}").format(pieces["rn"]) if counted else sql.SQL("")
        pieces["raw_n"] = sql.SQL(", sum(n)" if counted else "")
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


@dataclass(frozen=True)
class Cells:
    gpu_id: np.ndarray  # int32
    epoch: np.ndarray  # float64 bucket starts, Unix seconds
    value: np.ndarray  # float64 means, NaN where the bucket had samples but none with this metric
    samples: np.ndarray | None = None  # float64 samples behind each mean (a `counted` query's), else None


def fetch_cells(conn: Connection[Any], cells: sql.Composed, params: dict[str, Any], counted: bool = False) -> Cells:
    """Run a cells query and take its result as three packed binary columns in one row, read with
    numpy: a heatmap's hundreds of thousands of cells arrive without a Python object per value (as
    rows, converting them cost four times the query). timestamptz_send, not extract(epoch): the latter
    goes through numeric and cost more than the scan."""
    samples = ", string_agg(float8send(coalesce(n::float8, 0)), ''::bytea)" if counted else ""
    row = conn.execute(
        sql.SQL(
            "SELECT string_agg(int4send(gpu_id), ''::bytea), string_agg(timestamptz_send(b), ''::bytea),"
            " string_agg(float8send(coalesce(v::float8, 'NaN')), ''::bytea){samples} FROM ({cells}) AS cells {names}"
        ).format(
            samples=sql.SQL(samples), cells=cells, names=sql.SQL("(gpu_id, b, v, n)" if counted else "(gpu_id, b, v)")
        ),
        params,
        binary=True,
    ).fetchone()
    if row is None or row[0] is None:
        return Cells(np.empty(0, np.int32), np.empty(0), np.empty(0), np.empty(0) if counted else None)
    return Cells(
        gpu_id=np.frombuffer(row[0], ">i4").astype(np.int32),
        epoch=np.frombuffer(row[1], ">i8") / 1e6 + PG_EPOCH_S,
        value=np.frombuffer(row[2], ">f8").astype(np.float64),
        samples=np.frombuffer(row[3], ">f8").astype(np.float64) if counted else None,
    )


def widen(cells: Cells, bucket_s: int) -> Cells:
    """`counted` cells regrouped into buckets of `bucket_s` (epoch-aligned, as date_bin aligns them):
    each the mean of its samples, the finer means weighted by the samples behind them, so the answer is
    what reading the wide buckets in SQL gives, with NaN where none had a value."""
    if cells.samples is None:
        raise ValueError("widen() needs counted cells (cells_query(..., counted=True))")
    if not cells.gpu_id.size:
        return Cells(cells.gpu_id, cells.epoch, cells.value)
    starts = np.floor(cells.epoch / bucket_s) * bucket_s
    order = np.lexsort((starts, cells.gpu_id))
    gpu_id, start = cells.gpu_id[order], starts[order]
    first = np.flatnonzero(np.r_[True, (gpu_id[1:] != gpu_id[:-1]) | (start[1:] != start[:-1])])
    weight = np.where(np.isnan(cells.value[order]), 0.0, cells.samples[order])
    sums = np.add.reduceat(np.where(weight > 0, cells.value[order] * weight, 0.0), first)
    counts = np.add.reduceat(weight, first)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, sums / counts, np.nan)
    return Cells(gpu_id[first], start[first], means)
