"""Heatmap: one metric for every GPU (rows, grouped by cluster/rack/node) over time buckets (columns)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from psycopg import Connection

from collector.query.cells import cells_query, fetch_by_gpu, rollup_splits
from collector.query.timerange import TimeRange
from collector.store.columns import GPU_METRIC_KEYS


@dataclass(frozen=True)
class HeatmapRow:
    gpu_id: int
    cluster: str
    rack: str
    node: str
    gpu_index: int
    uuid: str

    @property
    def label(self) -> str:
        return f"{self.rack}/{self.node}/gpu{self.gpu_index}"


@dataclass(frozen=True)
class Heatmap:
    metric: str
    bucket_s: int
    rows: list[HeatmapRow]
    times: list[datetime]
    values: np.ndarray  # shape (len(rows), len(times)); NaN where no sample fell in the bucket


def heatmap(
    conn: Connection[Any], metric: str, time_range: TimeRange, bucket_s: int, gpu_ids: Sequence[int] | None = None
) -> Heatmap:
    """`gpu_ids`: only these GPUs (a node's, a job's); None: every GPU that reported in the range."""
    if metric not in GPU_METRIC_KEYS:
        raise ValueError(f"unknown metric {metric!r}; one of {sorted(GPU_METRIC_KEYS)}")
    splits = rollup_splits(conn) if bucket_s >= 60 else None
    query, params = cells_query(metric, time_range, bucket_s, splits, gpu_ids)
    by_gpu = fetch_by_gpu(conn, query, params)
    rows = [
        HeatmapRow(*r)
        for r in conn.execute(
            "SELECT g.gpu_id, n.cluster, n.rack, n.name, g.gpu_index, g.uuid"
            " FROM gpu g JOIN node n USING (node_id) WHERE g.gpu_id = ANY(%s)"
            " ORDER BY n.cluster, n.rack, n.name, g.gpu_index",
            (sorted(by_gpu),),
        ).fetchall()
    ]
    times = time_range.buckets(bucket_s)
    values = np.full((len(rows), len(times)), np.nan)
    if times:
        first = times[0].timestamp()
        for i, row in enumerate(rows):
            epochs, means = by_gpu[row.gpu_id]
            columns = np.rint((epochs - first) / bucket_s).astype(np.int64)
            inside = (columns >= 0) & (columns < len(times))
            values[i, columns[inside]] = means[inside]
    return Heatmap(metric=metric, bucket_s=bucket_s, rows=rows, times=times, values=values)
