"""Hour rollups from minute rollups, and every tier (hour, minute, raw) giving the same answer as raw."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import psycopg
import pytest

from gpuscope.collector import query
from gpuscope.collector.query.cells import Splits, cells_query, rollup_splits
from tests.collector.three_hours import HOURS, T0, roll_up, sample_three_hours


@pytest.fixture
def conn(dsn: str):  # type: ignore[no-untyped-def]
    with psycopg.connect(dsn, autocommit=True) as connection:
        sample_three_hours(connection)
        yield connection


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
