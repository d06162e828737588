"""The dashboard's two heavy reads at scale, through its own data layer and a read pool as it opens one:
the overview page's refresh (fleet summary, attention list, activity heatmap, rack power) and the
heatmap page's (every GPU over the last hour at one-minute buckets, shown at the finest row level that
fits the screen: nodes or racks at this size). Each is run once to warm the caches, then timed; the
headline figure is the 95th percentile of the runs (inclusive: never past the slowest)."""

from __future__ import annotations

import statistics
from typing import Any

from gpuscope.bench.timing import p95, timed
from gpuscope.core.pools import open_read_pool
from gpuscope.dashboard import data

RANGE = "1h"  # the pages' default range


def time_pages(dsn: str, runs: int) -> dict[str, Any]:
    pool = open_read_pool(dsn, max_size=2)
    try:
        overview, shown = timed(lambda: data.load_overview(pool, RANGE).heatmap, runs)
        heatmap, grid = timed(lambda: data.load_grid(pool, "util_pct", RANGE, "auto"), runs)
    finally:
        pool.close()
    return {
        "overview_ms": round(p95(overview), 1),
        "overview_ms_p50": round(statistics.median(overview), 1),
        "overview_heatmap_level": shown.level,
        "overview_heatmap_rows": len(shown.rows),
        "heatmap_ms": round(p95(heatmap), 1),
        "heatmap_ms_p50": round(statistics.median(heatmap), 1),
        "heatmap_range": RANGE,
        "heatmap_level": grid.level,
        "heatmap_rows": len(grid.rows),
        "heatmap_columns": len(grid.times),
        "heatmap_gpus_read": sum(row.gpus for row in grid.rows),
    }
