"""One-minute and one-hour rollups kept up to date incrementally on plain PostgreSQL.

Ingest marks each minute a batch touches as dirty (in the batch's transaction); maintenance then
re-aggregates dirty minutes that are at least SETTLE old from the raw rows and upserts them, so late
data (a spool replayed hours later) is rolled up too. Each minute rolled up marks its hour dirty; an
hour is re-aggregated from the minute rollup once no minute of it can still change. Readers take the
hour rollup, then the minute rollup, then raw rows, each where the coarser one stops (collector/query).
Beside the minute rollup, in the same pass over the same minutes: power per rack (rack_power_1m, and
rack_power_10m from it for day-long charts) and the node tier (node_rollup_1m: each node's GPU minute
means summed, for node- and rack-level heatmaps), all re-aggregated from the minute rollup whenever a
minute is, so late data reaches them too.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from psycopg import AsyncConnection

log = logging.getLogger(__name__)

SETTLE = timedelta(minutes=2)  # minutes younger than this may still receive samples in the normal flow
MAX_MINUTES_PER_PASS = 240
MAX_MINUTES_PER_STATEMENT = 15
MINUTE = timedelta(minutes=1)
MAX_HOURS_PER_PASS = 48

# rollup column -> raw column (sum and count are kept for each)
ROLLED = {
    "util": "util_pct",
    "sm_active": "sm_active_pct",
    "tensor": "tensor_active_pct",
    "power": "power_w",
    "temp": "temp_c",
    "sm_clock": "sm_clock_mhz",
}
SUMMED = ("samples", "up_samples", *(f"{name}_{part}" for name in ROLLED for part in ("sum", "n")))


async def mark_dirty(conn: AsyncConnection[Any], stamps: np.ndarray) -> None:
    """Record the minutes of these sample timestamps (seconds) as needing a rollup."""
    if stamps.size == 0:
        return
    minutes = np.unique(np.floor(stamps / 60) * 60)
    await conn.execute(
        # DO UPDATE, not DO NOTHING: the row lock it takes makes a concurrent roll_up skip this minute
        # until our samples are committed, so they cannot fall between its snapshot and its delete.
        "INSERT INTO rollup_dirty_minute (bucket) SELECT to_timestamp(m) FROM unnest(%s::float8[]) AS m"
        " ORDER BY 1 ON CONFLICT (bucket) DO UPDATE SET bucket = EXCLUDED.bucket",
        (minutes.tolist(),),
    )


def _upsert_tail(table: str) -> str:
    """Rows rolled up again (late data re-rolls every GPU's row of its minute) are written only where a
    value changed: an unchanged row rewritten costs a new tuple, a new entry in the key that carries every
    column (migration 0023) and its page's all-visible mark, which index-only reads need."""
    columns = (*SUMMED, "temp_max", "sm_clock_min")
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns)
    old = ", ".join(f"{table}.{c}" for c in columns)
    new = ", ".join(f"EXCLUDED.{c}" for c in columns)
    return f" ON CONFLICT (gpu_id, bucket) DO UPDATE SET {updates} WHERE ({old}) IS DISTINCT FROM ({new})"


def _minute_sql() -> str:
    sums = ", ".join(f"sum({raw}), count({raw})" for raw in ROLLED.values())
    # Identifiers here come from the constants above, never from input.
    return (
        f"INSERT INTO gpu_rollup_1m (bucket, gpu_id, {', '.join(SUMMED)}, temp_max, sm_clock_min)"  # noqa: S608
        f" SELECT date_bin('1 minute', ts, 'epoch'), gpu_id, count(*), count(*) FILTER (WHERE up), {sums},"
        "        max(temp_c), min(sm_clock_mhz)"
        " FROM gpu_sample WHERE ts >= %(start)s AND ts < %(end)s"
        " GROUP BY 1, 2" + _upsert_tail("gpu_rollup_1m")
    )


def _hour_sql() -> str:
    sums = ", ".join(f"sum({c})" for c in SUMMED)
    return (
        f"INSERT INTO gpu_rollup_1h (bucket, gpu_id, {', '.join(SUMMED)}, temp_max, sm_clock_min)"  # noqa: S608
        f" SELECT %(start)s, gpu_id, {sums}, max(temp_max), min(sm_clock_min)"
        " FROM gpu_rollup_1m WHERE bucket >= %(start)s AND bucket < %(start)s + interval '1 hour'"
        " GROUP BY gpu_id" + _upsert_tail("gpu_rollup_1h")
    )


AGGREGATE_MINUTE = _minute_sql()
AGGREGATE_HOUR = _hour_sql()
# Each GPU's energy counter at its first and last sample of the minute (collector/store/usage.py).
ENERGY_MINUTE = (
    "INSERT INTO gpu_energy_1m (bucket, gpu_id, first_j, last_j)"
    " SELECT date_bin('1 minute', ts, 'epoch'), gpu_id, (array_agg(energy_j ORDER BY ts))[1],"
    " (array_agg(energy_j ORDER BY ts DESC))[1]"
    " FROM gpu_sample WHERE ts >= %(start)s AND ts < %(end)s AND energy_j IS NOT NULL"
    " GROUP BY 1, 2 ON CONFLICT (gpu_id, bucket) DO UPDATE SET first_j = EXCLUDED.first_j, last_j = EXCLUDED.last_j"
)
RACK_POWER = (
    "INSERT INTO rack_power_1m (bucket, cluster, rack, watts, gpus)"
    " SELECT r.bucket, n.cluster, n.rack, sum(r.power_sum / r.power_n), count(*)"
    " FROM gpu_rollup_1m r JOIN gpu g USING (gpu_id) JOIN node n USING (node_id)"
    " WHERE r.bucket >= %(start)s AND r.bucket < %(end)s AND r.power_n > 0 GROUP BY 1, 2, 3"
    " ON CONFLICT (cluster, rack, bucket) DO UPDATE SET watts = EXCLUDED.watts, gpus = EXCLUDED.gpus"
)
# Per rack and 10 minutes, re-aggregated from rack_power_1m over every 10 minutes the span touches
# (migration 0022): a span of a few minutes still rewrites whole 10-minute rows, each exact for the
# minutes it has, and complete once its last minute is rolled up.
RACK_POWER_10M = (
    "INSERT INTO rack_power_10m (bucket, cluster, rack, watts_sum, minutes)"
    " SELECT date_bin('10 minutes', bucket, 'epoch'), cluster, rack, sum(watts), count(*) FROM rack_power_1m"
    " WHERE bucket >= date_bin('10 minutes', %(start)s::timestamptz, 'epoch')"
    "  AND bucket < date_bin('10 minutes', %(end)s::timestamptz - interval '1 minute', 'epoch') + interval '10 minutes'"
    " GROUP BY 1, 2, 3"
    " ON CONFLICT (bucket, cluster, rack) DO UPDATE SET watts_sum = EXCLUDED.watts_sum, minutes = EXCLUDED.minutes"
)

# Per node and minute, each metric's GPU minute means summed and the GPUs counted (migration 0019).
NODE_MINUTE = (
    "INSERT INTO node_rollup_1m (bucket, node_id, gpus, "  # noqa: S608 (identifiers from ROLLED)
    + ", ".join(f"{name}_mean_sum, {name}_gpus" for name in ROLLED)
    + ") SELECT r.bucket, g.node_id, count(*), "
    + ", ".join(f"sum(r.{name}_sum / nullif(r.{name}_n, 0)), count(*) FILTER (WHERE r.{name}_n > 0)" for name in ROLLED)
    + " FROM gpu_rollup_1m r JOIN gpu g USING (gpu_id)"
    " WHERE r.bucket >= %(start)s AND r.bucket < %(end)s GROUP BY 1, 2"
    " ON CONFLICT (node_id, bucket) DO UPDATE SET gpus = EXCLUDED.gpus, "
    + ", ".join(f"{name}_mean_sum = EXCLUDED.{name}_mean_sum, {name}_gpus = EXCLUDED.{name}_gpus" for name in ROLLED)
)


async def roll_up(conn: AsyncConnection[Any], now: datetime | None = None) -> int:
    """Aggregate settled dirty minutes (oldest first, at most MAX_MINUTES_PER_PASS), then the hours
    they complete; returns how many minutes."""
    cutoff = (now or datetime.now(UTC)) - SETTLE
    cur = await conn.execute(
        "DELETE FROM rollup_dirty_minute WHERE bucket IN (SELECT bucket FROM rollup_dirty_minute"
        " WHERE bucket < %s ORDER BY bucket LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING bucket",
        (cutoff - timedelta(minutes=1), MAX_MINUTES_PER_PASS),
    )
    minutes = sorted(row[0] for row in await cur.fetchall())
    for start, end in minute_runs(minutes):
        span = {"start": start, "end": end}
        await conn.execute(AGGREGATE_MINUTE, span)
        await conn.execute(ENERGY_MINUTE, span)
        await conn.execute(RACK_POWER, span)
        await conn.execute(RACK_POWER_10M, span)
        await conn.execute(NODE_MINUTE, span)
    if minutes:
        await conn.execute(
            "INSERT INTO rollup_dirty_hour (bucket) SELECT DISTINCT date_trunc('hour', m)"
            " FROM unnest(%s::timestamptz[]) AS m ORDER BY 1"
            " ON CONFLICT (bucket) DO UPDATE SET bucket = EXCLUDED.bucket",
            (minutes,),
        )
    await _roll_up_hours(conn, cutoff)
    return len(minutes)


def minute_runs(minutes: list[datetime]) -> list[tuple[datetime, datetime]]:
    """Consecutive minutes as [start, end) runs of at most MAX_MINUTES_PER_STATEMENT: one statement per run
    (a replayed spool or a backfill dirties hours of minutes), each still a bounded piece of work."""
    runs: list[tuple[datetime, datetime]] = []
    for minute in minutes:
        if runs and runs[-1][1] == minute and minute - runs[-1][0] < MAX_MINUTES_PER_STATEMENT * MINUTE:
            runs[-1] = (runs[-1][0], minute + MINUTE)
        else:
            runs.append((minute, minute + MINUTE))
    return runs


async def _roll_up_hours(conn: AsyncConnection[Any], cutoff: datetime) -> None:
    """Hours that are over and have no minute waiting: none of their minutes can change now."""
    cur = await conn.execute(
        "DELETE FROM rollup_dirty_hour WHERE bucket IN (SELECT h.bucket FROM rollup_dirty_hour h"
        " WHERE h.bucket + interval '1 hour' <= %s AND NOT EXISTS (SELECT FROM rollup_dirty_minute m"
        "  WHERE m.bucket >= h.bucket AND m.bucket < h.bucket + interval '1 hour')"
        " ORDER BY h.bucket LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING bucket",
        (cutoff - timedelta(minutes=1), MAX_HOURS_PER_PASS),
    )
    for (hour,) in await cur.fetchall():
        await conn.execute(AGGREGATE_HOUR, {"start": hour})
