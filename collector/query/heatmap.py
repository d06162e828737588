"""Heatmap: one metric for every GPU (rows, grouped by cluster/rack/node) over time buckets (columns);
and series: several metrics for a chosen set of GPUs (a node, one GPU, a job), the same way."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from psycopg import Connection

from collector.query.cells import cells_query, fetch_by_gpu, rollup_splits
from collector.query.inventory import GpuRow, gpu_rows
from collector.query.timerange import TimeRange
from collector.store.columns import GPU_METRIC_KEYS


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
    by_gpu = _cells(conn, metric, time_range, bucket_s, gpu_ids)
    rows = gpu_rows(conn, sorted(by_gpu))
    times = time_range.buckets(bucket_s)
    return Heatmap(metric, bucket_s, rows, times, _place(by_gpu, rows, times, bucket_s))


def series(
    conn: Connection[Any], metrics: Sequence[str], time_range: TimeRange, bucket_s: int, gpu_ids: Sequence[int]
) -> Series:
    """Every GPU in `gpu_ids` gets a row, reporting or not (a silent GPU is the finding)."""
    rows = gpu_rows(conn, gpu_ids)
    times = time_range.buckets(bucket_s)
    values = {
        metric: _place(_cells(conn, metric, time_range, bucket_s, gpu_ids), rows, times, bucket_s) for metric in metrics
    }
    return Series(bucket_s, rows, times, values)


def _cells(
    conn: Connection[Any], metric: str, time_range: TimeRange, bucket_s: int, gpu_ids: Sequence[int] | None
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    if metric not in GPU_METRIC_KEYS:
        raise ValueError(f"unknown metric {metric!r}; one of {sorted(GPU_METRIC_KEYS)}")
    splits = rollup_splits(conn) if bucket_s >= 60 else None
    return fetch_by_gpu(conn, *cells_query(metric, time_range, bucket_s, splits, gpu_ids))


def _place(
    by_gpu: dict[int, tuple[np.ndarray, np.ndarray]], rows: list[GpuRow], times: list[datetime], bucket_s: int
) -> np.ndarray:
    values = np.full((len(rows), len(times)), np.nan)
    if times:
        first = times[0].timestamp()
        for i, row in enumerate(rows):
            if row.gpu_id not in by_gpu:
                continue
            epochs, means = by_gpu[row.gpu_id]
            columns = np.rint((epochs - first) / bucket_s).astype(np.int64)
            inside = (columns >= 0) & (columns < len(times))
            values[i, columns[inside]] = means[inside]
    return values
