"""Power per rack from its tiers: rack_power_10m kept by the rollups (late data included), and the
reader's mix of 10-minute rows, minute rows and raw samples giving the exact answer raw samples give,
wherever the rollups stop."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import numpy as np
import psycopg
import pytest

from gpuscope.collector import query
from tests.collector.three_hours import roll_up

T0 = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)
HOURS = 2
NOW = T0 + timedelta(hours=HOURS + 1)  # every minute settled
RANGE = query.TimeRange(T0, T0 + timedelta(hours=HOURS))


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection]:
    """Two racks of two GPUs each, every 20 s, power changing each sample; one GPU skips samples, so
    that minutes hold different numbers of them (a mean of means differs from the exact mean)."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(
            "CREATE TABLE gpu_sample_p20261101 PARTITION OF gpu_sample"
            " FOR VALUES FROM ('2026-11-01 00:00+00') TO ('2026-11-02 00:00+00')"
        )
        for rack in ("r1", "r2"):
            node_id = connection.execute(
                "INSERT INTO node (cluster, name, rack) VALUES ('c', %s, %s) RETURNING node_id", (f"n-{rack}", rack)
            ).fetchone()[0]  # type: ignore[index]
            for index in range(2):
                connection.execute(
                    "INSERT INTO gpu (node_id, gpu_index, uuid, model, pci_bus_id) VALUES (%s, %s, %s, 'H100', 'x')",
                    (node_id, index, f"GPU-{rack}-{index}"),
                )
        connection.execute(
            "INSERT INTO gpu_sample (ts, gpu_id, up, power_w)"
            " SELECT %s + s * interval '1 second', g, true, 100 + g * 10 + (s * 7 + g) %% 53"
            " FROM generate_series(0, %s - 20, 20) AS s, generate_series(1, 4) AS g WHERE g <> 2 OR s %% 140 <> 0",
            (T0, HOURS * 3600),
        )
        yield connection


def from_raw(conn: psycopg.Connection, bucket_s: int) -> dict[tuple[str, datetime], float]:
    """The definition: per rack and bucket, the mean over its minutes of the sum of GPU minute means."""
    rows = conn.execute(
        "SELECT rack, date_bin(%s, minute, 'epoch'), avg(watts) FROM ("
        " SELECT n.cluster || '/' || n.rack AS rack, minute, sum(watts) AS watts FROM ("
        "  SELECT gpu_id, date_bin('1 minute', ts, 'epoch') AS minute, avg(power_w) AS watts FROM gpu_sample"
        "  GROUP BY 1, 2) AS m JOIN gpu USING (gpu_id) JOIN node n USING (node_id) GROUP BY 1, 2) AS r"
        " GROUP BY 1, 2",
        (timedelta(seconds=bucket_s),),
    ).fetchall()
    return {(rack, bucket): value for rack, bucket, value in rows}


def answer(conn: psycopg.Connection, bucket_s: int) -> dict[tuple[str, datetime], float]:
    result = query.rack_power(conn, RANGE, bucket_s)
    return {
        (rack, t): float(result.watts[i, j])
        for i, rack in enumerate(result.racks)
        for j, t in enumerate(result.times)
        if not np.isnan(result.watts[i, j])
    }


def test_the_ten_minute_tier_holds_each_racks_minutes(conn: psycopg.Connection, dsn: str) -> None:
    roll_up(dsn, NOW)
    rows = conn.execute("SELECT cluster || '/' || rack, bucket, watts_sum / minutes, minutes FROM rack_power_10m")
    tens = {(rack, bucket): (mean, minutes) for rack, bucket, mean, minutes in rows.fetchall()}
    assert len(tens) == 2 * HOURS * 6
    assert {minutes for _, minutes in tens.values()} == {10}
    expected = from_raw(conn, 600)
    assert tens.keys() == expected.keys()
    for key, (mean, _) in tens.items():
        assert mean == pytest.approx(expected[key], rel=1e-12)


def test_late_data_reaches_the_ten_minute_tier(conn: psycopg.Connection, dsn: str) -> None:
    roll_up(dsn, NOW)
    late = T0 + timedelta(minutes=34, seconds=5)
    conn.execute("INSERT INTO gpu_sample (ts, gpu_id, up, power_w) VALUES (%s, 1, true, 5000)", (late,))
    conn.execute("INSERT INTO rollup_dirty_minute VALUES (%s)", (late.replace(second=0),))
    roll_up(dsn, NOW)
    row = conn.execute(
        "SELECT watts_sum / minutes FROM rack_power_10m WHERE rack = 'r1' AND bucket = %s",
        (T0 + timedelta(minutes=30),),
    ).fetchone()
    assert row is not None
    assert row[0] == pytest.approx(from_raw(conn, 600)[("c/r1", T0 + timedelta(minutes=30))], rel=1e-12)


@pytest.mark.parametrize("bucket_s", [600, 1200, 3600, 300, 60])
@pytest.mark.parametrize("waiting", [None, 0, 9, 10, 47, 119])
def test_every_mix_of_tiers_gives_the_raw_answer(
    conn: psycopg.Connection, dsn: str, bucket_s: int, waiting: int | None
) -> None:
    """`waiting`: a minute (from T0) still waiting to be rolled up, where the rollups stop for readers
    (10-minute rows before its 10 minutes, minute rows to it, raw samples after)."""
    roll_up(dsn, NOW)
    if waiting is not None:
        conn.execute("INSERT INTO rollup_dirty_minute VALUES (%s)", (T0 + timedelta(minutes=waiting),))
    expected = from_raw(conn, bucket_s)
    got = answer(conn, bucket_s)
    assert got.keys() == expected.keys()
    for key, value in got.items():
        assert value == pytest.approx(expected[key], rel=1e-12), key


def test_a_days_chart_is_read_from_the_ten_minute_tier(conn: psycopg.Connection, dsn: str) -> None:
    """Its rows are what the answer is made of (changed here by hand, to tell them from minute rows)."""
    roll_up(dsn, NOW)
    before = answer(conn, 600)
    conn.execute("UPDATE rack_power_10m SET watts_sum = watts_sum * 2")
    after = answer(conn, 600)
    assert after.keys() == before.keys()
    for key, value in after.items():
        assert value == pytest.approx(2 * before[key], rel=1e-12)
