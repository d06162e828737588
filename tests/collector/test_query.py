"""The query layer over known rows: bucket averages, grouping, gaps and rack sums."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import numpy as np
import psycopg
import pytest

from gpuscope.collector import query
from gpuscope.collector.query.cells import Splits, cells_query
from gpuscope.collector.store import rollups

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def conn(dsn: str):  # type: ignore[no-untyped-def]
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(
            "CREATE TABLE gpu_sample_p20261101 PARTITION OF gpu_sample"
            " FOR VALUES FROM ('2026-11-01 00:00+00') TO ('2026-11-02 00:00+00')"
        )
        # Two racks; rack-b's node is inserted first so ordering cannot come from insertion order.
        for node_id, rack, node in ((1, "rack-b", "n2"), (2, "rack-a", "n1")):
            connection.execute(
                "INSERT INTO node (cluster, name, rack) OVERRIDING SYSTEM VALUE VALUES (%s, %s, %s)", ("c", node, rack)
            )
            for index in (1, 0):
                connection.execute(
                    "INSERT INTO gpu (node_id, gpu_index, uuid, model, pci_bus_id) VALUES (%s, %s, %s, 'H100', 'x')",
                    (node_id, index, f"GPU-{node}-{index}"),
                )
        gpus = connection.execute("SELECT gpu_id, uuid FROM gpu").fetchall()
        for gpu_id, gpu_uuid in gpus:
            for second in range(0, 120, 10):
                util = 10.0 if second < 60 else 90.0  # first minute 10 %, second minute 90 %
                if gpu_uuid == "GPU-n1-1" and second >= 60:
                    continue  # this GPU went silent: a gap, not a zero
                connection.execute(
                    "INSERT INTO gpu_sample (ts, gpu_id, up, util_pct, power_w) VALUES (%s, %s, true, %s, %s)",
                    (T0 + timedelta(seconds=second), gpu_id, util, 100.0 + second),
                )
        roll_up_everything(dsn)
        yield connection


def roll_up_everything(dsn: str) -> None:
    """What ingest and maintenance do for rows written through the collector: mark and roll up."""

    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(
                "INSERT INTO rollup_dirty_minute SELECT DISTINCT date_bin('1 minute', ts, 'epoch') FROM gpu_sample"
                " ON CONFLICT DO NOTHING"
            )
            await rollups.roll_up(conn)

    asyncio.run(run())


def test_heatmap_averages_buckets_and_groups_by_rack_then_node(conn: psycopg.Connection) -> None:
    result = query.heatmap(conn, "util_pct", query.TimeRange(T0, T0 + timedelta(minutes=2)), 60)
    assert [r.label for r in result.rows] == ["rack-a/n1/gpu0", "rack-a/n1/gpu1", "rack-b/n2/gpu0", "rack-b/n2/gpu1"]
    assert result.times == [T0, T0 + timedelta(minutes=1)]
    np.testing.assert_allclose(result.values[:, 0], [10, 10, 10, 10])
    assert np.isnan(result.values[1, 1]), "a GPU with no samples in a bucket shows a gap"
    np.testing.assert_allclose(result.values[[0, 2, 3], 1], [90, 90, 90])


def test_rollup_and_raw_give_the_same_heatmap(conn: psycopg.Connection) -> None:
    time_range = query.TimeRange(T0, T0 + timedelta(minutes=2))
    from_rollup = query.heatmap(conn, "util_pct", time_range, 60)
    sql_raw, params = cells_query("util_pct", time_range, 60, splits=None)
    raw = {(g, b): v for g, b, v in conn.execute(sql_raw, params).fetchall()}
    rolled_sql, rolled_params = cells_query("util_pct", time_range, 60, Splits(T0, T0 + timedelta(hours=1)))
    rolled = {(g, b): v for g, b, v in conn.execute(rolled_sql, rolled_params).fetchall()}
    assert rolled == pytest.approx(raw) and len(raw) == 7
    assert from_rollup.values.shape == (4, 2)


def test_late_sample_in_a_rolled_minute_is_rolled_up_again(conn: psycopg.Connection, dsn: str) -> None:
    before = conn.execute("SELECT util_n FROM gpu_rollup_1m WHERE bucket = %s LIMIT 1", (T0,)).fetchone()
    gpu_id = conn.execute("SELECT gpu_id FROM gpu_rollup_1m WHERE bucket = %s LIMIT 1", (T0,)).fetchone()
    conn.execute(
        "INSERT INTO gpu_sample (ts, gpu_id, up, util_pct) VALUES (%s, %s, true, 10)",
        (T0 + timedelta(seconds=5), gpu_id[0]),
    )
    roll_up_everything(dsn)
    after = conn.execute(
        "SELECT util_n FROM gpu_rollup_1m WHERE bucket = %s AND gpu_id = %s", (T0, gpu_id[0])
    ).fetchone()
    assert after[0] == before[0] + 1


def test_rack_power_sums_gpu_means(conn: psycopg.Connection) -> None:
    result = query.rack_power(conn, query.TimeRange(T0, T0 + timedelta(minutes=2)), 60)
    assert result.racks == ["c/rack-a", "c/rack-b"]
    first_minute_mean = np.mean([100 + s for s in range(0, 60, 10)])
    second_minute_mean = np.mean([100 + s for s in range(60, 120, 10)])
    np.testing.assert_allclose(result.watts[1], [2 * first_minute_mean, 2 * second_minute_mean])
    np.testing.assert_allclose(result.watts[0], [2 * first_minute_mean, second_minute_mean])


def test_heatmap_refuses_unknown_metric(conn: psycopg.Connection) -> None:
    with pytest.raises(ValueError, match="unknown metric"):
        query.heatmap(conn, "util_pct); DROP TABLE gpu; --", query.TimeRange(T0, T0 + timedelta(minutes=1)), 60)


@pytest.mark.parametrize(("seconds", "expected"), [(900, 5), (3600, 30), (6 * 3600, 120), (24 * 3600, 600)])
def test_bucket_for_keeps_charts_readable(seconds: int, expected: int) -> None:
    assert query.bucket_for(query.last(seconds), max_points=180) == expected


def test_time_range_rejects_naive_or_backwards_bounds() -> None:
    with pytest.raises(ValueError):
        query.TimeRange(datetime(2026, 1, 1), datetime(2026, 1, 2))
    with pytest.raises(ValueError):
        query.TimeRange(T0, T0 - timedelta(seconds=1))
