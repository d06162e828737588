"""One GPU's minutes are read from the minute rollup's key alone (migration 0023): the rollup job writes a
minute of every GPU at a time, so without it one GPU's day lies on a heap page per minute."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from gpuscope.collector.query.cells import Splits, cells_query
from gpuscope.collector.query.timerange import TimeRange
from gpuscope.collector.store import rollups
from gpuscope.collector.store.migrate import migrate
from tests.collector.test_partitions import fresh_database, maintain
from tests.waiting import eventually

START = datetime(2026, 11, 1, tzinfo=UTC)
GPUS = 64
MINUTES = 6 * 60


def _fleet(conn: psycopg.Connection[Any]) -> None:
    conn.execute("INSERT INTO node (cluster, name, rack) SELECT 'c', 'n' || i, 'r' FROM generate_series(1, 8) i")
    conn.execute(
        "INSERT INTO gpu (node_id, gpu_index, uuid, model, pci_bus_id)"
        " SELECT 1 + i / 8, mod(i, 8), 'GPU-' || i, 'H100', '0' FROM generate_series(0, %s - 1) i",
        (GPUS,),
    )


def _minutes_as_the_rollup_job_writes_them(conn: psycopg.Connection[Any]) -> None:
    """Minute after minute, every GPU's row of that minute (one statement a minute, as maintenance
    rolls up each settled minute); utilisation = the GPU's id plus the minute's number."""
    for minute in range(MINUTES):
        conn.execute(
            "INSERT INTO gpu_rollup_1m (bucket, gpu_id, samples, up_samples, util_sum, util_n, sm_active_n,"
            " tensor_n, power_sum, power_n, temp_n, sm_clock_n)"
            " SELECT %(b)s, gpu_id, 6, 6, 6.0 * (gpu_id + %(m)s), 6, 0, 0, 2400, 6, 0, 0 FROM gpu",
            {"b": START + timedelta(minutes=minute), "m": minute},
        )


def _one_gpu(gpu_id: int) -> tuple[sql.Composed, dict[str, Any]]:
    """The read of a GPU page's day at 1-minute buckets, every minute from the rollup."""
    end = START + timedelta(minutes=MINUTES)
    return cells_query("util_pct", TimeRange(START, end), 60, Splits(hour=end, minute=end), [gpu_id])


def _plan(conn: psycopg.Connection[Any], gpu_id: int) -> dict[str, Any]:
    statement, params = _one_gpu(gpu_id)
    row = conn.execute(sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) {}").format(statement), params).fetchone()
    assert row is not None
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return plan[0]["Plan"]


def _scans_of(node: dict[str, Any], table: str) -> list[dict[str, Any]]:
    found = [node] if node.get("Relation Name") == table else []
    for child in node.get("Plans", []):
        found += _scans_of(child, table)
    return found


@pytest.fixture
def rolled_up(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Durable commits, as in production: the test server's asynchronous ones leave rows whose commit
        # is not yet flushed, which VACUUM may not mark all-visible.
        conn.execute("SET synchronous_commit = on")
        _fleet(conn)
        _minutes_as_the_rollup_job_writes_them(conn)
    return dsn


def _vacuumed_scan(dsn: str, gpu_id: int) -> dict[str, Any] | None:
    """The rollup's scan in the plan of one GPU's read right after a VACUUM, as autovacuum leaves the
    table (it is told to come often); None while some page is still not all-visible: VACUUM may not
    mark a page while another session's snapshot (any test's, on this shared server) is older than
    its rows."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE gpu_rollup_1m")
        (scan,) = _scans_of(_plan(conn, gpu_id), "gpu_rollup_1m")
    return scan if scan.get("Heap Fetches") == 0 else None


def test_one_gpus_minutes_are_an_index_only_scan_that_never_visits_the_heap(rolled_up: str) -> None:
    gpu_id = 37
    scan = eventually(
        lambda: _vacuumed_scan(rolled_up, gpu_id), what="an index-only scan with no heap fetch", timeout=60
    )
    with psycopg.connect(rolled_up) as conn:
        statement, params = _one_gpu(gpu_id)
        values = conn.execute(
            sql.SQL("SELECT v FROM ({}) AS cells (gpu_id, b, v) ORDER BY b").format(statement), params
        ).fetchall()
    assert scan["Node Type"] == "Index Only Scan", scan["Node Type"]
    assert scan["Actual Rows"] == MINUTES
    assert [v for (v,) in values] == [float(gpu_id + m) for m in range(MINUTES)], "the key's copy is the row"


def test_autovacuum_is_told_to_keep_the_visibility_map_fresh(dsn: str) -> None:
    """An insert-only table is vacuumed by default after a fifth of its rows are new: days of minutes
    whose pages an index-only scan would still have to visit."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT reloptions FROM pg_class WHERE relname = 'gpu_rollup_1m'").fetchone()
    assert row is not None
    options = dict(option.split("=") for option in row[0])
    assert options["autovacuum_vacuum_insert_scale_factor"] == "0"
    assert int(options["autovacuum_vacuum_insert_threshold"]) <= 100_000


def test_the_upgrade_keeps_every_minute_and_still_refuses_a_second_row_for_a_gpu_minute(postgres) -> None:  # type: ignore[no-untyped-def]
    dsn = fresh_database(postgres.dsn)
    migrate(dsn, up_to=22)
    with psycopg.connect(dsn, autocommit=True) as conn:
        _fleet(conn)
        _minutes_as_the_rollup_job_writes_them(conn)
    assert migrate(dsn) == [23]
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*), sum(util_sum) FROM gpu_rollup_1m").fetchone()
        assert row == (GPUS * MINUTES, sum(6.0 * (g + m) for g in range(1, GPUS + 1) for m in range(MINUTES)))
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(
                "INSERT INTO gpu_rollup_1m (bucket, gpu_id, samples, up_samples, util_n, sm_active_n, tensor_n,"
                " power_n, temp_n, sm_clock_n) VALUES (%s, 1, 1, 1, 0, 0, 0, 0, 0, 0)",
                (START,),
            )


def test_a_minute_rolled_up_again_rewrites_only_the_rows_whose_values_changed(dsn: str) -> None:
    """Late data re-rolls every GPU's row of its minute: the others' rows stay as they were (a rewritten
    row costs a tuple, an entry in the wide key and its page's all-visible mark)."""
    now = datetime.now(UTC)
    minute = now.replace(second=0, microsecond=0) - timedelta(minutes=10)
    maintain(dsn, timedelta(days=30), now)
    with psycopg.connect(dsn, autocommit=True) as conn:
        _fleet(conn)
        for gpu_id in range(1, 9):
            conn.execute(
                "INSERT INTO gpu_sample (ts, gpu_id, up, util_pct) VALUES (%s, %s, true, 50)",
                (minute + timedelta(seconds=5), gpu_id),
            )
        conn.execute("INSERT INTO rollup_dirty_minute VALUES (%s)", (minute,))
        roll_up_now(dsn, now)
        before = dict(conn.execute("SELECT gpu_id, xmin::text FROM gpu_rollup_1m").fetchall())
        # a late sample of GPU 3, its minute marked again as ingest marks it
        conn.execute(
            "INSERT INTO gpu_sample (ts, gpu_id, up, util_pct) VALUES (%s, 3, true, 70)",
            (minute + timedelta(seconds=35),),
        )
        conn.execute("INSERT INTO rollup_dirty_minute VALUES (%s)", (minute,))
        roll_up_now(dsn, now)
        after = dict(conn.execute("SELECT gpu_id, xmin::text FROM gpu_rollup_1m").fetchall())
        util = conn.execute("SELECT util_sum / util_n FROM gpu_rollup_1m WHERE gpu_id = 3").fetchone()
    assert util == (60.0,)
    assert [gpu_id for gpu_id in sorted(before) if before[gpu_id] != after[gpu_id]] == [3]


def roll_up_now(dsn: str, now: datetime) -> None:
    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await rollups.roll_up(conn, now)

    asyncio.run(run())
