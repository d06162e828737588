"""Heatmap rows at the granularity the screen can show: per GPU, or averaged per node or per rack when
there are too many GPUs, so the browser never gets more than MAX_CELLS cells."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import numpy as np

from gpuscope.collector.query import Heatmap
from gpuscope.dashboard.scales import scale_of

Level = Literal["gpu", "node", "rack"]
MAX_CELLS = 200_000


@dataclass(frozen=True)
class GridRow:
    label: str
    rack: str  # "cluster/rack"
    node: str | None  # None on rack rows
    gpu: int | None  # GPU index; None on node and rack rows
    gpus: int  # GPUs averaged into this row
    gpu_id: int | None = None  # the store's id of a GPU row's GPU (node names repeat across clusters)


@dataclass(frozen=True)
class Grid:
    metric: str
    bucket_s: int
    level: Level
    rows: list[GridRow]
    times: list[datetime]
    values: np.ndarray  # (len(rows), len(times)); NaN where nothing was reported
    jobs: np.ndarray | None = None  # GPU rows: who held each cell ("job J (user)", "": none); see with_jobs

    @property
    def cells(self) -> int:
        return int(self.values.size)


def choose_level(gpus: int, nodes: int, columns: int, requested: str = "auto") -> Level:
    """The finest level that fits MAX_CELLS (a requested level is honoured when it fits)."""
    counts: dict[Level, int] = {"gpu": gpus, "node": nodes}
    for level, rows in counts.items():
        if requested == level and rows * columns <= MAX_CELLS:
            return level
    if requested == "rack":
        return "rack"
    for level, rows in counts.items():
        if rows * columns <= MAX_CELLS:
            return level
    return "rack"


def to_grid(heatmap: Heatmap, level: Level) -> Grid:
    """Rows per node or rack, summing up the GPUs that reported in each bucket as the metric's scale
    says (dashboard/scales.py: the mean, or the worst GPU: the hottest, the slowest clock), NaN-aware.
    Heatmap rows come ordered by cluster, rack, node and GPU, so each group is contiguous."""
    rows = heatmap.rows
    if level == "gpu":
        grid_rows = [GridRow(r.label, f"{r.cluster}/{r.rack}", r.node, r.gpu_index, 1, r.gpu_id) for r in rows]
        return Grid(heatmap.metric, heatmap.bucket_s, level, grid_rows, heatmap.times, heatmap.values)
    keys = [(r.cluster, r.rack, r.node if level == "node" else "") for r in rows]
    starts = [i for i in range(len(keys)) if i == 0 or keys[i] != keys[i - 1]]
    values = heatmap.values
    if not starts:
        return Grid(heatmap.metric, heatmap.bucket_s, level, [], heatmap.times, np.empty((0, len(heatmap.times))))
    worst = scale_of(heatmap.metric).rows
    if worst == "mean":
        present = ~np.isnan(values)
        sums = np.add.reduceat(np.where(present, values, 0.0), starts, axis=0)
        counts = np.add.reduceat(present.astype(np.int64), starts, axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    else:  # fmax/fmin skip NaN (a GPU that did not report), and give NaN where none did
        means = (np.fmax if worst == "max" else np.fmin).reduceat(values, starts, axis=0)
    sizes = np.diff([*starts, len(keys)])
    grid_rows = []
    for start, size in zip(starts, sizes, strict=True):
        cluster, rack, node = keys[start]
        label = f"{rack}/{node}" if level == "node" else rack
        grid_rows.append(GridRow(label, f"{cluster}/{rack}", node or None, None, int(size)))
    return Grid(heatmap.metric, heatmap.bucket_s, level, grid_rows, heatmap.times, means)


# A hover names the job of its cell only while that costs little: one short string per cell travels
# with the figure, so a 1,024-GPU heatmap of 120 buckets would grow by megabytes.
JOB_HOVER_CELLS_MAX = 30_000


def with_jobs(grid: Grid, held: Callable[[list[int]], np.ndarray]) -> Grid:
    """`grid` with its cells' jobs, where its rows are GPUs and it is small enough; `held` answers for
    GPU ids (collector/query/held_by.py over the grid's buckets)."""
    if grid.level != "gpu" or not grid.rows or grid.cells > JOB_HOVER_CELLS_MAX:
        return grid
    return dataclasses.replace(grid, jobs=held([row.gpu_id for row in grid.rows if row.gpu_id is not None]))
