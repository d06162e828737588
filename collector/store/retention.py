"""How long each kind of data is kept, and the hourly pass that drops what is older.

Raw samples go first (whole daily partitions), minute rollups later, hour rollups and events last:
each coarser tier outlives the finer one, so a long-range chart still has data after raw is gone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg import AsyncConnection, sql

from gpuscope.collector.store import partitions, timescale
from gpuscope.collector.store.timescale import Layout

log = logging.getLogger(__name__)

MINUTE_TABLES = ("gpu_rollup_1m", "rack_power_1m", "rack_power_10m", "gpu_energy_1m", "node_rollup_1m")
HOUR_TABLES = ("gpu_rollup_1h",)


@dataclass(frozen=True)
class Retention:
    raw: timedelta = timedelta(days=30)
    minute_rollups: timedelta = timedelta(days=90)
    hour_rollups: timedelta = timedelta(days=730)  # and events and stragglers

    def __post_init__(self) -> None:
        if self.raw <= timedelta(0):
            raise ValueError("raw retention must be positive")
        if self.minute_rollups < self.raw:
            raise ValueError("minute rollups must be kept at least as long as raw samples")
        if self.hour_rollups < self.minute_rollups:
            raise ValueError("hour rollups must be kept at least as long as minute rollups")


DEFAULT_RETENTION = Retention()


async def apply(
    conn: AsyncConnection[Any], retention: Retention, now: datetime | None = None, layout: Layout = "plain"
) -> dict[str, int]:
    """Drop raw samples, rollups and events past their retention (plain layout: and make partitions
    ahead); returns the rows deleted per table (dropped partitions and chunks are logged)."""
    now = now or datetime.now(UTC)
    cutoffs: list[tuple[str, timedelta, str]] = [
        ("event", retention.hour_rollups, "ts"),
        ("straggler", retention.hour_rollups, "started_at"),
        ("straggler_job_model", retention.hour_rollups, "updated_at"),
        ("usage_1h", retention.hour_rollups, "bucket"),
        ("usage_hour", retention.hour_rollups, "bucket"),
    ]
    if layout == "timescaledb":
        await timescale.drop_old(
            conn,
            {
                "raw": now - retention.raw,
                "minute": now - retention.minute_rollups,
                "hour": now - retention.hour_rollups,
            },
        )
    else:
        await partitions.maintain(conn, retention.raw, now)
        cutoffs += [(t, retention.minute_rollups, "bucket") for t in MINUTE_TABLES]
        cutoffs += [(t, retention.hour_rollups, "bucket") for t in HOUR_TABLES]
    deleted = {}
    for table, keep, column in cutoffs:
        cur = await conn.execute(
            sql.SQL("DELETE FROM {} WHERE {} < %s").format(sql.Identifier(table), sql.Identifier(column)),
            (now - keep,),
        )
        deleted[table] = cur.rowcount
    if any(deleted.values()):
        log.info("retention: deleted %s", ", ".join(f"{n} rows from {t}" for t, n in deleted.items() if n))
    return deleted
