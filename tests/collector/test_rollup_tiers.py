"""Hour rollups from minute rollups, and every tier (hour, minute, raw) giving the same answer as raw."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import numpy as np
import psycopg
import pytest

from gpuscope.collector import query
from gpuscope.collector.query.cells import Splits, cells_query, rollup_splits
from gpuscope.collector.store import rollups

T0 = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)
HOURS = 3


@pytest.fixture
def conn(dsn: str):  # type: ignore[no-untyped-def]
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(
            "CREATE TABLE gpu_sample_p20261101 PARTITION OF gpu_sample"
            " FOR VALUES FROM ('2026-11-01 00:00+00') TO ('2026-11-02 00:00+00')"
        )
        connection.execute("INSERT INTO node (cluster, name, rack) VALUES ('c', 'n1', 'r1')")
        for index in range(2):
            connection.execute(
                "INSERT INTO gpu (node_id, gpu_index, uuid, model, pci_bus_id) VALUES (1, %s, %s, 'H100', 'x')",
                (index, f"GPU-{index}"),
            )
        # Every 20 s for three hours; utilisation varies within each hour, one GPU skips some samples.
        connection.execute(
            "INSERT INTO gpu_sample (ts, gpu_id, up, util_pct, power_w)"
            " SELECT %s + s * interval '1 second', g, true, (s / 20) %% 97, 300 + g"
            " FROM generate_series(0, %s - 20, 20) AS s, generate_series(1, 2) AS g WHERE g = 1 OR s %% 140 <> 0",
            (T0, HOURS * 3600),
        )
        yield connection


def roll_up(dsn: str, now: datetime) -> None:
    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(
                "INSERT INTO rollup_dirty_minute SELECT DISTINCT date_bin('1 minute', ts, 'epoch') FROM gpu_sample"
                " ON CONFLICT DO NOTHING"
            )
            while await rollups.roll_up(conn, now):
                pass

    asyncio.run(run())


def cells(conn: psycopg.Connection, bucket_s: int, splits: Splits | None) -> dict:
    statement, params = cells_query("util_pct", query.TimeRange(T0, T0 + timedelta(hours=HOURS)), bucket_s, splits)
    return {(g, b): v for g, b, v in conn.execute(statement, params).fetchall()}


def test_hours_roll_up_only_once_complete(conn: psycopg.Connection, dsn: str) -> None:
    roll_up(dsn, now=T0 + timedelta(hours=2, minutes=30))  # the third hour is not over
    hours = conn.execute("SELECT DISTINCT bucket FROM gpu_rollup_1h ORDER BY 1").fetchall()
    assert [h for (h,) in hours] == [T0, T0 + timedelta(hours=1)]
    roll_up(dsn, now=T0 + timedelta(hours=4))
    row = conn.execute("SELECT samples, util_n FROM gpu_rollup_1h WHERE gpu_id = 1 AND bucket = %s", (T0,)).fetchone()
    assert row == (180, 180)
    assert conn.execute("SELECT count(*) FROM rollup_dirty_hour").fetchone() == (0,)


@pytest.mark.parametrize("bucket_s", [60, 600, 3600, 7200])
def test_every_tier_mix_matches_raw(conn: psycopg.Connection, dsn: str, bucket_s: int) -> None:
    roll_up(dsn, now=T0 + timedelta(hours=5))
    raw = cells(conn, bucket_s, None)
    assert raw
    for hour_split, minute_split in [(1, 2), (0, 2), (2, 2), (3, 3), (1, 1)]:
        splits = Splits(T0 + timedelta(hours=hour_split), T0 + timedelta(hours=minute_split, minutes=17))
        mixed = cells(conn, bucket_s, splits)
        assert mixed.keys() == raw.keys()
        np.testing.assert_allclose([mixed[k] for k in raw], list(raw.values()), rtol=1e-9)


def test_splits_stop_at_the_oldest_minute_or_hour_waiting(conn: psycopg.Connection, dsn: str) -> None:
    roll_up(dsn, now=T0 + timedelta(hours=5))
    late = T0 + timedelta(hours=1, minutes=30, seconds=5)
    conn.execute("INSERT INTO gpu_sample (ts, gpu_id, up, util_pct) VALUES (%s, 1, true, 100)", (late,))
    conn.execute("INSERT INTO rollup_dirty_minute VALUES (%s)", (late.replace(second=0),))
    splits = rollup_splits(conn, now=T0 + timedelta(hours=5))
    assert splits == Splits(hour=T0 + timedelta(hours=1), minute=late.replace(second=0))
    before = cells(conn, 3600, None)
    assert cells(conn, 3600, splits) == pytest.approx(before)
    roll_up(dsn, now=T0 + timedelta(hours=5))
    assert rollup_splits(conn, now=T0 + timedelta(hours=5)).hour == T0 + timedelta(hours=4)
    assert cells(conn, 3600, rollup_splits(conn, now=T0 + timedelta(hours=5))) == pytest.approx(before)
