"""One-minute rollups kept up to date incrementally on plain PostgreSQL.

Ingest marks each minute a batch touches as dirty (in the batch's transaction); maintenance then
re-aggregates dirty minutes that are at least SETTLE old from the raw rows and upserts them, so late
data (a spool replayed hours later) is rolled up too. Readers take the rollup for whole minutes older
than SETTLE and raw rows for the rest (see collector/query).
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

# rollup column -> raw column (sum and count are kept for each)
ROLLED = {
    "util": "util_pct",
    "sm_active": "sm_active_pct",
    "tensor": "tensor_active_pct",
    "power": "power_w",
    "temp": "temp_c",
    "sm_clock": "sm_clock_mhz",
}


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


def _aggregate_sql() -> str:
    sums = ", ".join(f"sum({raw}), count({raw})" for raw in ROLLED.values())
    columns = ", ".join(f"{name}_sum, {name}_n" for name in ROLLED)
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for name in ROLLED for c in (f"{name}_sum", f"{name}_n"))
    # Identifiers here come from the ROLLED constant above, never from input.
    return (
        f"INSERT INTO gpu_rollup_1m (bucket, gpu_id, samples, up_samples, {columns}, temp_max, sm_clock_min)"  # noqa: S608
        f" SELECT date_bin('1 minute', ts, 'epoch'), gpu_id, count(*), count(*) FILTER (WHERE up), {sums},"
        "        max(temp_c), min(sm_clock_mhz)"
        " FROM gpu_sample WHERE ts >= %(start)s AND ts < %(start)s + interval '1 minute'"
        " GROUP BY 1, 2"
        f" ON CONFLICT (gpu_id, bucket) DO UPDATE SET samples = EXCLUDED.samples,"
        f" up_samples = EXCLUDED.up_samples, {updates}, temp_max = EXCLUDED.temp_max,"
        " sm_clock_min = EXCLUDED.sm_clock_min"
    )


AGGREGATE = _aggregate_sql()
RACK_POWER = (
    "INSERT INTO rack_power_1m (bucket, cluster, rack, watts, gpus)"
    " SELECT r.bucket, n.cluster, n.rack, sum(r.power_sum / r.power_n), count(*)"
    " FROM gpu_rollup_1m r JOIN gpu g USING (gpu_id) JOIN node n USING (node_id)"
    " WHERE r.bucket = %(start)s AND r.power_n > 0 GROUP BY 1, 2, 3"
    " ON CONFLICT (cluster, rack, bucket) DO UPDATE SET watts = EXCLUDED.watts, gpus = EXCLUDED.gpus"
)


async def roll_up(conn: AsyncConnection[Any], now: datetime | None = None) -> int:
    """Aggregate settled dirty minutes (oldest first, at most MAX_MINUTES_PER_PASS); returns how many."""
    cutoff = (now or datetime.now(UTC)) - SETTLE
    cur = await conn.execute(
        "DELETE FROM rollup_dirty_minute WHERE bucket IN (SELECT bucket FROM rollup_dirty_minute"
        " WHERE bucket < %s ORDER BY bucket LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING bucket",
        (cutoff - timedelta(minutes=1), MAX_MINUTES_PER_PASS),
    )
    minutes = [row[0] for row in await cur.fetchall()]
    for minute in minutes:
        await conn.execute(AGGREGATE, {"start": minute})
        await conn.execute(RACK_POWER, {"start": minute})
    return len(minutes)
