"""What the overview page shows, loaded through the query layer in one short read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg_pool import ConnectionPool

from collector import query

RANGES_S = {"15m": 15 * 60, "1h": 3600, "6h": 6 * 3600, "24h": 24 * 3600}
HEATMAP_MAX_COLUMNS = 180
POWER_MAX_POINTS = 240


@dataclass(frozen=True)
class OverviewData:
    summary: query.FleetSummary
    heatmap: query.Heatmap
    rack_power: query.RackPower


def load_overview(pool: ConnectionPool[Any], range_key: str, metric: str = "util_pct") -> OverviewData:
    if range_key not in RANGES_S:
        raise ValueError(f"unknown range {range_key!r}; one of {list(RANGES_S)}")
    time_range = query.last(RANGES_S[range_key])
    with pool.connection() as conn:
        return OverviewData(
            summary=query.fleet_summary(conn),
            heatmap=query.heatmap(conn, metric, time_range, query.bucket_for(time_range, HEATMAP_MAX_COLUMNS)),
            rack_power=query.rack_power(conn, time_range, query.bucket_for(time_range, POWER_MAX_POINTS)),
        )
