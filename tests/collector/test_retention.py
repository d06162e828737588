"""Retention on plain PostgreSQL: raw partitions, minute rollups, hour rollups and events each dropped
past their own horizon, and the horizons kept in order (coarser outlives finer)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from gpuscope.collector.store.retention import Retention, apply

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
AGES_DAYS = (1, 45, 120, 800)


def run_apply(dsn: str, retention: Retention) -> dict[str, int]:
    async def go() -> dict[str, int]:
        async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
            return await apply(conn, retention, NOW)

    return asyncio.run(go())


def test_each_tier_is_dropped_past_its_own_horizon(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO node (cluster, name, rack) VALUES ('c', 'n', 'r')")
        for days in AGES_DAYS:
            at = NOW - timedelta(days=days)
            conn.execute(
                "INSERT INTO gpu_rollup_1m (bucket, gpu_id, samples, up_samples, util_n, sm_active_n, tensor_n,"
                " power_n, temp_n, sm_clock_n) VALUES (%s, 1, 1, 1, 0, 0, 0, 0, 0, 0)",
                (at,),
            )
            conn.execute("INSERT INTO gpu_rollup_1h SELECT * FROM gpu_rollup_1m WHERE bucket = %s", (at,))
            conn.execute("INSERT INTO rack_power_1m VALUES (%s, 'c', 'r', 100, 1)", (at,))
            conn.execute("INSERT INTO rack_power_10m VALUES (%s, 'c', 'r', 100, 1)", (at,))
            conn.execute(
                "INSERT INTO node_rollup_1m (bucket, node_id, gpus, util_gpus, sm_active_gpus, tensor_gpus,"
                " power_gpus, temp_gpus, sm_clock_gpus) VALUES (%s, 1, 1, 0, 0, 0, 0, 0, 0)",
                (at,),
            )
            conn.execute("INSERT INTO event (ts, node_id, kind) VALUES (%s, 1, 'xid')", (at,))
            conn.execute("INSERT INTO gpu_energy_1m VALUES (%s, 1, 0, 1)", (at,))
            conn.execute("INSERT INTO usage_hour VALUES (%s, %s, true)", (at, at))
            conn.execute(
                "INSERT INTO usage_1h VALUES (%s, 'j', 'H100', NULL, NULL, NULL, NULL, 1, 3600, 3600,"
                " 0, 0, 0, 0, 0, 0, 0)",
                (at,),
            )
    deleted = run_apply(dsn, Retention())  # 30 / 90 / 730 days
    assert deleted == {"gpu_rollup_1m": 2, "rack_power_1m": 2, "rack_power_10m": 2, "gpu_energy_1m": 2,
                       "node_rollup_1m": 2,
                       "gpu_rollup_1h": 1, "event": 1, "straggler": 0, "straggler_job_model": 0, "usage_1h": 1,
                       "usage_hour": 1}  # fmt: skip
    with psycopg.connect(dsn) as conn:

        def ages(table: str, column: str = "bucket") -> list[int]:
            rows = conn.execute(f"SELECT {column} FROM {table} ORDER BY 1 DESC").fetchall()  # noqa: S608
            return [(NOW - at).days for (at,) in rows]

        assert ages("gpu_rollup_1m") == [1, 45]
        assert ages("rack_power_1m") == [1, 45]
        assert ages("rack_power_10m") == [1, 45]
        assert ages("node_rollup_1m") == [1, 45]
        assert ages("gpu_rollup_1h") == [1, 45, 120]
        assert ages("event", "ts") == [1, 45, 120]
    assert run_apply(dsn, Retention()) == dict.fromkeys(deleted, 0), "a second pass finds nothing more"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"raw": timedelta(0)}, "positive"),
        ({"raw": timedelta(days=100)}, "minute rollups"),
        ({"minute_rollups": timedelta(days=800)}, "hour rollups"),
    ],
)
def test_horizons_must_keep_coarser_tiers_longer(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Retention(**kwargs)
