"""The TimescaleDB layout run for real (PGlite with TimescaleDB 2.23): applied by the collector's own
setup, then the same rows loaded into it and into plain PostgreSQL, and every query of the read layer
compared: same answers from hypertables and continuous aggregates (compressed or not, materialized or
real-time) as from partitions and incremental rollups."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

import numpy as np
import psycopg
import pytest

from gpuscope.collector import query
from gpuscope.collector.query.jobstats import job_report
from gpuscope.collector.query.usage import usage_report
from gpuscope.collector.store import partitions, rollups, timescale, usage
from gpuscope.collector.store.migrate import migrate

T0 = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)
RANGE = query.TimeRange(T0, T0 + timedelta(hours=3))
NOW = T0 + timedelta(hours=3)  # j2 is still running then

LOAD = [
    "INSERT INTO node (cluster, name, rack) VALUES ('c', 'n1', 'rack-a'), ('c', 'n2', 'rack-b')",
    "INSERT INTO gpu (node_id, gpu_index, uuid, model, pci_bus_id)"
    " SELECT n, i, 'GPU-' || n || '-' || i, 'H100', 'x' FROM generate_series(1, 2) n, generate_series(0, 1) i",
    "INSERT INTO ib_port (node_id, device, port) VALUES (1, 'mlx5_0', 1), (2, 'mlx5_0', 1)",
    # Three hours every 30 s; values vary per GPU and over time; GPU 4 misses every seventh sample.
    # The energy counter: GPU 2's restarts at 90 minutes; GPU 3 has none (its energy is power x time).
    "INSERT INTO gpu_sample (ts, gpu_id, up, util_pct, power_w, temp_c, sm_active_pct, energy_j)"
    " SELECT %(t0)s + s * interval '1 second', g, true, (s / 30 + g * 7) %% 101, 200 + g * 10 + (s / 30) %% 13,"
    "        40 + g, ((s / 30) * g) %% 100,"
    "        CASE WHEN g = 3 THEN NULL WHEN g = 2 AND s >= 5400 THEN (s - 5400) * 220.0"
    "             ELSE 1e6 + s * (200 + g * 10.0) END"
    " FROM generate_series(0, 3 * 3600 - 30, 30) s, generate_series(1, 4) g WHERE g <> 4 OR (s / 30) %% 7 <> 0",
    "INSERT INTO ib_port_sample (ts, port_id, xmit_bytes, state)"
    " SELECT %(t0)s + s * interval '1 second', p, (1000 * p * s)::bigint, 4"
    " FROM generate_series(0, 3 * 3600 - 30, 30) s, generate_series(1, 2) p",
    "INSERT INTO job_allocation (job_id, username, node_id, gpu_id, started_at, last_seen, ended_at) VALUES"
    " ('j1', 'alice', 1, 1, %(t0)s + interval '7 minutes', %(t0)s + interval '150 minutes',"
    "  %(t0)s + interval '151 minutes'),"
    " ('j1', 'alice', 1, 2, %(t0)s + interval '7 minutes', %(t0)s + interval '150 minutes',"
    "  %(t0)s + interval '151 minutes'),"
    " ('j2', 'bob', 2, 3, %(t0)s + interval '30 minutes', %(t0)s + interval '170 minutes', NULL)",
    "INSERT INTO event (ts, node_id, gpu_id, kind, code) VALUES (%(t0)s + interval '1 hour', 1, 2, 'xid', 79)",
]


def load(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in LOAD:
            conn.execute(statement, {"t0": T0})


def prepare_plain(dsn: str) -> None:
    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await partitions.ensure(conn, {date(2026, 11, 1)})
            load(dsn)
            await conn.execute(
                "INSERT INTO rollup_dirty_minute SELECT DISTINCT date_bin('1 minute', ts, 'epoch') FROM gpu_sample"
            )
            while await rollups.roll_up(conn, T0 + timedelta(days=1)):
                pass
            await usage.update_usage(conn, keep=timedelta(days=1), now=NOW)

    migrate(dsn)
    assert timescale.setup(dsn, "auto") == "plain", "no timescaledb extension on the plain server"
    asyncio.run(run())


def prepare_timescale(dsn: str, compress: bool) -> None:
    migrate(dsn)
    assert timescale.setup(dsn, "auto") == "timescaledb"
    load(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        # What the refresh policies do on a server (PGlite runs no background jobs).
        conn.execute("CALL refresh_continuous_aggregate('gpu_rollup_1m', NULL, %s)", (T0 + timedelta(hours=2),))
        conn.execute("CALL refresh_continuous_aggregate('gpu_rollup_1h', NULL, %s)", (T0 + timedelta(hours=2),))
        conn.execute("CALL refresh_continuous_aggregate('gpu_energy_1m', NULL, %s)", (T0 + timedelta(hours=2),))
        if compress:
            conn.execute("SELECT compress_chunk(c) FROM show_chunks('gpu_sample') c")
            compressed = conn.execute(
                "SELECT count(*) FROM timescaledb_information.chunks"
                " WHERE hypertable_name = 'gpu_sample' AND is_compressed"
            ).fetchone()
            assert compressed == (3,), "three one-hour chunks, all compressed"
            for view in ("gpu_rollup_1m", "gpu_rollup_1h", "gpu_energy_1m"):  # what their policies do after a day
                conn.execute("SELECT compress_chunk(c) FROM show_chunks(%s) c", (view,))

    async def account() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await usage.update_usage(conn, keep=timedelta(days=1), now=NOW)

    asyncio.run(account())


QUERIES: dict[str, Callable[[psycopg.Connection], Any]] = {
    "heatmap 60 s": lambda c: query.heatmap(c, "util_pct", RANGE, 60),
    "heatmap 10 min": lambda c: query.heatmap(c, "power_w", RANGE, 600),
    "heatmap 1 h": lambda c: query.heatmap(c, "sm_active_pct", RANGE, 3600),
    "heatmap 30 s (raw)": lambda c: query.heatmap(c, "temp_c", RANGE, 30),
    "rack power 60 s": lambda c: query.rack_power(c, RANGE, 60),
    "rack power 1 h": lambda c: query.rack_power(c, RANGE, 3600),
    "series": lambda c: query.series(c, ["util_pct", "power_w"], RANGE, 300, query.select_gpus(c, node="n1")),
    "nic rates": lambda c: query.nic_series(c, "xmit_bytes", RANGE, 600, query.select_ports(c)),
    "jobs": lambda c: query.jobs(c, RANGE),
    "job gpus": lambda c: query.job_gpus(c, "j1"),
    "events": lambda c: query.events(c, RANGE),
    "usage by user": lambda c: usage_report(c, RANGE, "user"),
    "usage by job": lambda c: usage_report(c, RANGE, "job"),
    "job report": lambda c: job_report(c, "j2", now=NOW),
}


def answers(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn) as conn:
        return {name: run(conn) for name, run in QUERIES.items()}


def assert_same(plain: Any, other: Any, where: str) -> None:
    if isinstance(plain, np.ndarray):
        np.testing.assert_allclose(other, plain, rtol=1e-6, err_msg=where)
    elif isinstance(plain, float):
        assert other == pytest.approx(plain, rel=1e-6), where
    elif isinstance(plain, list | tuple):
        assert len(other) == len(plain), where
        for i, (p, o) in enumerate(zip(plain, other, strict=True)):
            assert_same(p, o, f"{where}[{i}]")
    elif isinstance(plain, dict):
        assert other.keys() == plain.keys(), where
        for key in plain:
            assert_same(plain[key], other[key], f"{where}[{key!r}]")
    elif hasattr(plain, "__dataclass_fields__"):
        for field in plain.__dataclass_fields__:
            assert_same(getattr(plain, field), getattr(other, field), f"{where}.{field}")
    else:
        assert other == plain, where


@pytest.mark.parametrize("compress", [False, True], ids=["rowstore", "columnstore"])
def test_every_query_answers_the_same_on_both_layouts(dsn: str, timescale_dsn: str, compress: bool) -> None:
    prepare_plain(dsn)
    prepare_timescale(timescale_dsn, compress)
    expected, got = answers(dsn), answers(timescale_dsn)
    assert np.isfinite(expected["heatmap 60 s"].values).sum() == 4 * 180, "the comparison covers real data"
    totals = expected["usage by user"].totals
    assert totals.gpu_hours_allocated > 0 and totals.energy_kwh > 0 and 0 < totals.energy_from_counter < 1
    for name in QUERIES:
        assert_same(expected[name], got[name], name)


def test_layout_objects_and_policies(timescale_dsn: str) -> None:
    migrate(timescale_dsn)
    assert timescale.setup(timescale_dsn, "on") == "timescaledb"
    assert timescale.setup(timescale_dsn, "auto") == "timescaledb", "applied once, recognised after"
    with pytest.raises(RuntimeError, match="cannot undo"):
        timescale.setup(timescale_dsn, "off")
    with psycopg.connect(timescale_dsn) as conn:
        aggregates = conn.execute(
            "SELECT view_name, materialized_only, compression_enabled"
            " FROM timescaledb_information.continuous_aggregates ORDER BY 1"
        ).fetchall()
    assert_layout(*layout_of(timescale_dsn))
    assert aggregates == [
        ("gpu_energy_1m", False, True),
        ("gpu_rollup_1h", False, True),
        ("gpu_rollup_1m", False, True),
    ], "real-time aggregation on, columnstore on"


def assert_layout(hypertables: list[Any], segmentby: list[Any], jobs: list[Any]) -> None:
    assert hypertables == [("gpu_sample", True), ("ib_port_sample", True), ("mig_sample", True)]
    # the samples, and the aggregates' materialized hypertables (layout step 2), segmented by device
    assert [row for row in segmentby if not row[0].startswith("_materialized")] == [
        ("gpu_sample", "gpu_id"),
        ("ib_port_sample", "port_id"),
        ("mig_sample", "mig_id"),
    ]
    assert [row[1] for row in segmentby if row[0].startswith("_materialized")] == ["gpu_id"] * 3
    assert jobs == [
        ("policy_compression", "gpu_energy_1m", None),
        ("policy_refresh_continuous_aggregate", "gpu_energy_1m", "06:00:00"),
        ("policy_compression", "gpu_rollup_1h", None),
        ("policy_refresh_continuous_aggregate", "gpu_rollup_1h", "12:00:00"),
        ("policy_compression", "gpu_rollup_1m", None),
        ("policy_refresh_continuous_aggregate", "gpu_rollup_1m", "06:00:00"),
        ("policy_compression", "gpu_sample", None),
        ("policy_compression", "ib_port_sample", None),
        ("policy_compression", "mig_sample", None),
    ]


def layout_of(dsn: str) -> tuple[list[Any], list[Any], list[Any]]:
    with psycopg.connect(dsn) as conn:
        hypertables = conn.execute(
            "SELECT hypertable_name, compression_enabled FROM timescaledb_information.hypertables ORDER BY 1"
        ).fetchall()
        segmentby = conn.execute(
            "SELECT hypertable_name, attname FROM timescaledb_information.compression_settings"
            " WHERE segmentby_column_index IS NOT NULL ORDER BY 1"
        ).fetchall()
        jobs = conn.execute(
            "SELECT proc_name, hypertable_name, config->>'start_offset' FROM timescaledb_information.jobs"
            " WHERE proc_name <> 'policy_job_stat_history_retention' ORDER BY 2, 1"
        ).fetchall()
    return hypertables, segmentby, jobs


def test_a_database_already_on_the_layout_gets_mig_samples_as_a_hypertable(timescale_dsn: str) -> None:
    """Migration 0013 (MIG devices) arrives after the layout was applied, which is applied once: the
    migration makes its sample table a hypertable itself, as the layout would have."""
    migrate(timescale_dsn, up_to=12)
    assert timescale.setup(timescale_dsn, "on") == "timescaledb"
    migrate(timescale_dsn)
    assert_layout(*layout_of(timescale_dsn))


def test_a_database_given_the_layout_by_an_older_collector_gets_its_later_steps(timescale_dsn: str) -> None:
    migrate(timescale_dsn)
    with psycopg.connect(timescale_dsn, autocommit=True) as conn:  # as a collector before step 2 left it
        conn.execute(timescale.layout_sql().encode())
        conn.execute("INSERT INTO schema_migration (version, name) VALUES (%s, %s)", (timescale.LAYOUT_VERSION, "x"))
    assert timescale.setup(timescale_dsn, "auto") == "timescaledb"
    assert_layout(*layout_of(timescale_dsn))
    assert timescale.setup(timescale_dsn, "auto") == "timescaledb", "each step applied once"


def test_real_time_aggregation_sees_rows_not_yet_materialized(timescale_dsn: str) -> None:
    prepare_timescale(timescale_dsn, compress=False)  # materialized up to T0 + 2 h only
    with psycopg.connect(timescale_dsn) as conn:
        raw = query.heatmap(conn, "util_pct", RANGE, 30).values  # raw samples, 30 s buckets
        minutes = query.heatmap(conn, "util_pct", RANGE, 60).values
    np.testing.assert_allclose(minutes, np.nanmean(raw.reshape(4, -1, 2), axis=2), rtol=1e-6)


def test_retention_drops_chunks_per_tier(timescale_dsn: str) -> None:
    prepare_timescale(timescale_dsn, compress=True)

    async def drop() -> None:
        async with await psycopg.AsyncConnection.connect(timescale_dsn, autocommit=True) as conn:
            # Aggregates are chunked ten times coarser than raw: a cutoff a day on drops their chunk.
            day_later = T0 + timedelta(days=1)
            await timescale.drop_old(conn, {"raw": T0 + timedelta(hours=2), "minute": day_later, "hour": day_later})

    asyncio.run(drop())
    with psycopg.connect(timescale_dsn) as conn:
        oldest_raw = conn.execute("SELECT min(ts) FROM gpu_sample").fetchone()
        oldest_minute = conn.execute("SELECT min(bucket) FROM gpu_rollup_1m").fetchone()
    assert oldest_raw == (T0 + timedelta(hours=2),), "the two older one-hour chunks are gone"
    # What is left of the minute aggregate is its real-time part: raw rows past the materialized end.
    assert oldest_minute == (T0 + timedelta(hours=2),)
