"""Heatmap: one metric for every GPU (rows, grouped by cluster/rack/node) over time buckets (columns);
and series: several metrics for a chosen set of GPUs (a node, one GPU, a job), the same way."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from psycopg import Connection

from gpuscope.collector.query.buckets import may_widen, read_width
from gpuscope.collector.query.cells import (
    RAW_TO_ROLLED,
    Cells,
    Splits,
    cells_query,
    fetch_cells,
    splits_for,
    widen,
)
from gpuscope.collector.query.inventory import GpuRow, gpu_rows, inventory_counts
from gpuscope.collector.query.timerange import TimeRange
from gpuscope.collector.store.columns import GPU_METRIC_KEYS


@dataclass(frozen=True)
class Heatmap:
    metric: str
    bucket_s: int
    rows: list[GpuRow]
    times: list[datetime]
    values: np.ndarray  # shape (len(rows), len(times)); NaN where no sample fell in the bucket


@dataclass(frozen=True)
class Series:
    bucket_s: int
    rows: list[GpuRow]
    times: list[datetime]
    values: dict[str, np.ndarray]  # metric -> shape (len(rows), len(times))


def heatmap(
    conn: Connection[Any], metric: str, time_range: TimeRange, bucket_s: int, gpu_ids: Sequence[int] | None = None
) -> Heatmap:
    """`gpu_ids`: only these GPUs; None: every GPU that reported in the range."""
    cells = _cells(conn, metric, time_range, bucket_s, gpu_ids, splits_for(conn, bucket_s))
    present = np.zeros(int(cells.gpu_id.max(initial=0)) + 1, dtype=bool)
    present[cells.gpu_id] = True
    rows = gpu_rows(conn, np.flatnonzero(present).tolist())
    times = time_range.buckets(bucket_s)
    return Heatmap(metric, bucket_s, rows, times, _place(cells, rows, times, bucket_s))


def series(
    conn: Connection[Any],
    metrics: Sequence[str],
    time_range: TimeRange,
    bucket_s: int,
    gpu_ids: Sequence[int],
    budget_s: float | None = None,
) -> Series:
    """Every GPU in `gpu_ids` gets a row, reporting or not (a silent GPU is the finding). `budget_s`: the
    session's statement limit (the read pool's, as the read API passes it), to be shared by the metrics'
    reads: with several, they run in one transaction, each statement cancelled (psycopg.errors.QueryCanceled)
    when the budget is spent; one metric's one statement has the session's limit already. None: each
    statement has the session's limit."""
    rows = gpu_rows(conn, gpu_ids)
    times = time_range.buckets(bucket_s)
    splits = splits_for(conn, bucket_s)  # once: every metric read up to the same split
    values = {}
    # One statement (one metric) is bounded by the session's limit, the budget: a transaction and SET
    # LOCAL would be three round trips of a GPU page's read for nothing.
    with _shared_budget(conn, budget_s if len(metrics) > 1 else None) as before_each:
        for metric in metrics:
            before_each()
            cells = _cells(conn, metric, time_range, bucket_s, gpu_ids, splits)
            values[metric] = _place(cells, rows, times, bucket_s)
    return Series(bucket_s, rows, times, values)


@contextlib.contextmanager
def _shared_budget(conn: Connection[Any], budget_s: float | None) -> Iterator[Callable[[], None]]:
    """A transaction whose statements together run at most `budget_s`: call the function yielded
    before each read to give the next statements what is left (SET LOCAL: it ends with the transaction)."""
    if budget_s is None:
        yield lambda: None
        return
    deadline = time.monotonic() + budget_s

    def before_each() -> None:
        left_ms = max(1, int((deadline - time.monotonic()) * 1000))
        conn.execute("SELECT set_config('statement_timeout', %s, true)", (f"{left_ms}ms",))

    with conn.transaction():
        yield before_each


def _cells(
    conn: Connection[Any],
    metric: str,
    time_range: TimeRange,
    bucket_s: int,
    gpu_ids: Sequence[int] | None,
    splits: Splits | None,
) -> Cells:
    """The metric's cells, read as the bucket policy says (buckets.read_width): buckets several
    minutes wide as the minute rollup's rows, widened here, where the metric is rolled up. `splits`:
    splits_for()'s."""
    if metric not in GPU_METRIC_KEYS:
        raise ValueError(f"unknown metric {metric!r}; one of {sorted(GPU_METRIC_KEYS)}")
    read_s = bucket_s
    if metric in RAW_TO_ROLLED and may_widen(bucket_s):  # counting the GPUs only where it matters
        series = inventory_counts(conn)[0] if gpu_ids is None else len(gpu_ids)
        read_s = read_width(bucket_s, time_range, series)
    if read_s == bucket_s:
        return fetch_cells(conn, *cells_query(metric, time_range, bucket_s, splits, gpu_ids))
    # The first wide bucket whole, as cells_query reads it: its minutes from the bucket's aligned start.
    whole = TimeRange(time_range.first_bucket(bucket_s), time_range.end)
    minutes = fetch_cells(conn, *cells_query(metric, whole, read_s, splits, gpu_ids, counted=True), counted=True)
    return widen(minutes, bucket_s)


def _place(cells: Cells, rows: list[GpuRow], times: list[datetime], bucket_s: int) -> np.ndarray:
    """The (row, bucket) matrix of `cells`, in one vectorised assignment (ids are small integers, so
    a lookup table maps them to rows)."""
    values = np.full((len(rows), len(times)), np.nan)
    if not times or not rows or not cells.gpu_id.size:
        return values
    size = max(int(cells.gpu_id.max()), max(row.gpu_id for row in rows)) + 1
    row_of = np.full(size, -1, dtype=np.int64)
    row_of[[row.gpu_id for row in rows]] = np.arange(len(rows))
    row_index = row_of[cells.gpu_id]
    columns = np.rint((cells.epoch - times[0].timestamp()) / bucket_s).astype(np.int64)
    inside = (row_index >= 0) & (columns >= 0) & (columns < len(times))
    values[row_index[inside], columns[inside]] = cells.value[inside]
    return values
