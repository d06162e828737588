"""The node tier (node_rollup_1m) kept by the rollup maintenance: node and rack rows, and the racks' power,
read from it (and raw samples after it) equal what the raw samples give, on generated fleets: minutes
with missing samples, GPUs without SM activity, a GPU going silent, late samples re-rolled, and raw
partitions dropped by retention."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg
import pytest

from gpuscope.collector.query.node_minutes import group_minutes
from gpuscope.collector.query.timerange import TimeRange
from gpuscope.collector.store import partitions, rollups

T0 = datetime(2026, 10, 3, 9, 0, tzinfo=UTC)
MINUTES = 40
WINDOW = TimeRange(T0, T0 + timedelta(minutes=MINUTES))
METRICS = ("sm_active_pct", "util_pct", "power_w")
SILENT_FROM = T0 + timedelta(minutes=25)  # GPU 1 stops reporting here


def make_fleet(conn: psycopg.Connection[Any], seed: int) -> None:
    """Two clusters, three racks, five nodes of four GPUs; ten-second samples, some dropped, some GPUs
    without SM activity, GPU 1 silent from SILENT_FROM."""
    rng = np.random.default_rng(seed)
    conn.execute(
        "CREATE TABLE gpu_sample_p20261003 PARTITION OF gpu_sample"
        " FOR VALUES FROM ('2026-10-03 00:00+00') TO ('2026-10-04 00:00+00')"
    )
    for cluster, name, rack in [
        ("a", "n1", "r1"),
        ("a", "n2", "r1"),
        ("a", "n3", "r2"),
        ("b", "n1", "r1"),
        ("b", "n9", "r1"),
    ]:
        conn.execute("INSERT INTO node (cluster, name, rack) VALUES (%s, %s, %s)", (cluster, name, rack))
    for node_id in range(1, 6):
        for index in range(4):
            conn.execute(
                "INSERT INTO gpu (node_id, gpu_index, uuid, model, pci_bus_id) VALUES (%s, %s, %s, 'H100', 'x')",
                (node_id, index, f"GPU-{node_id}-{index}"),
            )
    no_sm = set(rng.choice(np.arange(1, 21), 3, replace=False).tolist())
    rows = []
    for step in range(MINUTES * 6):
        ts = T0 + timedelta(seconds=10 * step + int(rng.integers(0, 3)))
        for gpu in range(1, 21):
            if rng.random() < 0.15 or (gpu == 1 and ts >= SILENT_FROM):
                continue
            sm = None if gpu in no_sm else float(rng.uniform(0, 100))
            rows.append((ts, gpu, True, float(rng.uniform(0, 100)), sm, float(rng.uniform(80, 700))))
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO gpu_sample (ts, gpu_id, up, util_pct, sm_active_pct, power_w) VALUES (%s, %s, %s, %s, %s, %s)",
            rows,
        )


def roll_up(dsn: str, stamps: list[datetime], now: datetime) -> None:
    """Mark the minutes of `stamps` dirty (as ingest does) and run the maintenance passes as of `now`."""

    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await rollups.mark_dirty(conn, np.array([s.timestamp() for s in stamps]))
            while await rollups.roll_up(conn, now):
                pass

    asyncio.run(run())


def all_stamps(conn: psycopg.Connection[Any]) -> list[datetime]:
    return [ts for (ts,) in conn.execute("SELECT DISTINCT ts FROM gpu_sample").fetchall()]


def from_raw(conn: psycopg.Connection[Any], metric: str, level: str) -> tuple[list[tuple], dict, dict]:
    """What the raw samples say, computed here: each GPU's minute mean, then per row (node or rack) the
    mean of its GPUs' means and the sum (power); row keys in chart order, with the GPUs that reported."""
    rows = conn.execute(
        f"SELECT n.cluster, n.rack, n.name, s.gpu_id, date_bin('1 minute', s.ts, 'epoch'), avg(s.{metric})::float8"  # noqa: S608
        " FROM gpu_sample s JOIN gpu g USING (gpu_id) JOIN node n USING (node_id)"
        " WHERE s.ts >= %s AND s.ts < %s GROUP BY 1, 2, 3, 4, 5",
        (WINDOW.start, WINDOW.end),
    ).fetchall()
    values: dict[tuple, dict[datetime, list[float]]] = defaultdict(lambda: defaultdict(list))
    gpus: dict[tuple, set[int]] = defaultdict(set)
    for cluster, rack, node, gpu, minute, mean in rows:
        key = (cluster, rack, node if level == "node" else None)
        gpus[key].add(gpu)
        if mean is not None:
            values[key][minute].append(mean)
    order = conn.execute(
        "SELECT DISTINCT cluster, rack, CASE WHEN %s THEN name END FROM node ORDER BY 1, 2, 3", (level == "node",)
    ).fetchall()
    keys = [tuple(k) for k in order if tuple(k) in gpus]
    return keys, {k: len(gpus[k]) for k in keys}, values


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("level", ["node", "rack"])
@pytest.mark.parametrize("rolled_to_minute", [MINUTES + 5, 22])  # all of it settled; the tier, then raw
def test_node_and_rack_rows_equal_the_raw_answer(dsn: str, seed: int, level: str, rolled_to_minute: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        make_fleet(conn, seed)
        roll_up(dsn, all_stamps(conn), now=T0 + timedelta(minutes=rolled_to_minute))
        # Real time is long past T0: the minutes not rolled up stay marked, so reads take raw samples there.
        assert_matches_raw(conn, level)


def test_late_samples_reach_the_tier_when_their_minute_is_rolled_again(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        make_fleet(conn, 7)
        roll_up(dsn, all_stamps(conn), now=T0 + timedelta(hours=1))
        late = [T0 + timedelta(minutes=5, seconds=33), T0 + timedelta(minutes=30, seconds=1)]
        for ts in late:  # a spool replayed: GPU 1 at 30 minutes too, after it went silent
            conn.execute("INSERT INTO gpu_sample (ts, gpu_id, up, util_pct, sm_active_pct, power_w)"
                         " VALUES (%s, 1, true, 100, 100, 1000), (%s, 2, true, 0, 0, 10)", (ts, ts))  # fmt: skip
        roll_up(dsn, late, now=T0 + timedelta(hours=1))
        assert_matches_raw(conn, "node")
        assert_matches_raw(conn, "rack")


def test_the_tier_outlives_the_raw_partitions_retention_drops(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        make_fleet(conn, 11)
        roll_up(dsn, all_stamps(conn), now=T0 + timedelta(hours=1))
        before = group_minutes(conn, METRICS, WINDOW, "node")

        async def drop_raw() -> list[str]:
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
                return await partitions.maintain(aconn, timedelta(days=1), now=T0 + timedelta(days=3))

        assert "gpu_sample_p20261003" in asyncio.run(drop_raw())
        assert conn.execute("SELECT count(*) FROM gpu_sample").fetchone() == (0,)
        after = group_minutes(conn, METRICS, WINDOW, "node")
    assert after.rows == before.rows
    for metric in METRICS:
        np.testing.assert_array_equal(after.gpus[metric], before.gpus[metric])
        np.testing.assert_allclose(after.sums[metric], before.sums[metric])


def test_maintenance_fills_the_tier_for_the_minutes_it_rolls_up(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        make_fleet(conn, 5)
        roll_up(dsn, all_stamps(conn), now=T0 + timedelta(hours=1))
        minutes = conn.execute("SELECT count(DISTINCT bucket), count(*) FROM node_rollup_1m").fetchone()
        assert minutes == (MINUTES, MINUTES * 5), "a node row per node and minute rolled up"
        conn.execute("TRUNCATE gpu_sample")  # the tier alone must answer the settled minutes
        assert_matches_tier_only(conn)


def assert_matches_tier_only(conn: psycopg.Connection[Any]) -> None:
    read = group_minutes(conn, METRICS, WINDOW, "node")
    assert len(read.rows) == 5
    assert (read.gpus["util_pct"].sum(axis=0) > 0).all(), "every minute answered by the tier"


# The samples' columns are float4 and the minute rollup sums them as such (sum(real) is real): the
# tier is as exact as the minute rollup it is built from, to float4's precision.
RTOL = 1e-6


def assert_matches_raw(conn: psycopg.Connection[Any], level: str) -> None:
    read = group_minutes(conn, METRICS, WINDOW, level)  # type: ignore[arg-type]
    for metric in METRICS:
        keys, gpus, values = from_raw(conn, metric, level)
        assert [(r.cluster, r.rack, r.node) for r in read.rows] == keys
        assert [r.gpus for r in read.rows] == [gpus[k] for k in keys]
        expected_mean = np.full((len(keys), len(read.times)), np.nan)
        expected_sum = np.full((len(keys), len(read.times)), np.nan)
        for i, key in enumerate(keys):
            for j, minute in enumerate(read.times):
                if values[key].get(minute):
                    expected_mean[i, j] = np.mean(values[key][minute])
                    expected_sum[i, j] = np.sum(values[key][minute])
        np.testing.assert_allclose(read.mean(metric), expected_mean, rtol=RTOL, err_msg=f"{metric} at {level}")
        if metric == "power_w":
            power = read.rack_power()
            racks = sorted({f"{c}/{r}" for c, r, _ in keys})
            assert power.racks == racks
            if level == "rack":
                order = [racks.index(f"{c}/{r}") for c, r, _ in keys]
                np.testing.assert_allclose(power.watts[order], expected_sum, rtol=RTOL)
