"""Writing telemetry straight into a test database, for rule and engine tests that need exact values."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import psycopg
from psycopg import sql

from gpuscope.alerts.engine import AlertEngine
from gpuscope.collector.store import partitions, rollups


def ensure_partitions(dsn: str) -> None:
    async def make() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
            today = dt.datetime.now(dt.UTC).date()
            await partitions.ensure(conn, {today - dt.timedelta(days=1), today, today + dt.timedelta(days=1)})

    asyncio.run(make())


def add_node(
    dsn: str, node: str, gpus: int = 2, ports: int = 0, cluster: str = "test", rack: str = "rack-0"
) -> list[int]:
    """The node's GPU ids (and its ports, ids in order, when asked); partitions for today exist after."""
    ensure_partitions(dsn)
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "INSERT INTO node (cluster, name, rack) VALUES (%s, %s, %s) RETURNING node_id", (cluster, node, rack)
        ).fetchone()
        assert row is not None
        ids = [
            conn.execute(
                "INSERT INTO gpu (node_id, gpu_index, uuid, model, pci_bus_id) VALUES (%s, %s, %s, 'H100', '-')"
                " RETURNING gpu_id",
                (row[0], g, f"GPU-{node}-{g}"),
            ).fetchone()[0]  # type: ignore[index]
            for g in range(gpus)
        ]
        for p in range(ports):
            conn.execute("INSERT INTO ib_port (node_id, device, port) VALUES (%s, %s, 1)", (row[0], f"mlx5_{p}"))
    return ids


def gpu_sample(dsn: str, gpu_id: int, ago_s: float = 0.0, up: bool = True, **values: Any) -> None:
    columns = ["ts", "gpu_id", "up", *values]
    with psycopg.connect(dsn) as conn:
        conn.execute(
            sql.SQL("INSERT INTO gpu_sample ({}) VALUES (now() - make_interval(secs => %s), {})").format(
                sql.SQL(", ").join(map(sql.Identifier, columns)),
                sql.SQL(", ").join(sql.Placeholder() * (len(columns) - 1)),
            ),
            (ago_s, gpu_id, up, *values.values()),
        )


def event(dsn: str, gpu_id: int, kind: str, code: int | None = None, count: int = 1) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO event (ts, node_id, gpu_id, kind, code, count)"
            " SELECT now(), node_id, gpu_id, %s, %s, %s FROM gpu WHERE gpu_id = %s",
            (kind, code, count, gpu_id),
        )


def history(dsn: str, gpu_ids: list[int], minutes: int, **columns: Any) -> None:
    """One sample a minute of each GPU over the last `minutes` (the newest now), its minutes marked as the
    ingest path marks them and rolled up as the collector's maintenance does. A column's value may be a
    function of (minutes ago, gpu_id); util_pct is 0 unless given."""
    columns = {"util_pct": 0.0, **columns}
    rows = [
        (ago, gpu_id, *(v(ago, gpu_id) if callable(v) else v for v in columns.values()))
        for gpu_id in gpu_ids
        for ago in range(minutes, -1, -1)
    ]
    statement = sql.SQL(
        "INSERT INTO gpu_sample (ts, gpu_id, up, {}) VALUES (now() - make_interval(mins => %s), %s, true, {})"
    )
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        cur.executemany(
            statement.format(
                sql.SQL(", ").join(map(sql.Identifier, columns)), sql.SQL(", ").join(sql.Placeholder() * len(columns))
            ),
            rows,
        )
        cur.execute(
            "INSERT INTO rollup_dirty_minute (bucket) SELECT DISTINCT date_trunc('minute', ts) FROM gpu_sample"
            " ON CONFLICT DO NOTHING"
        )
    asyncio.run(_roll_up(dsn))


async def _roll_up(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while await rollups.roll_up(conn):
            pass


def allocate(dsn: str, job: str, gpu_ids: list[int], started_min_ago: float, user: str = "hiro") -> None:
    """A running job holding these GPUs since `started_min_ago` minutes."""
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO job_allocation (job_id, username, node_id, gpu_id, started_at, last_seen)"
            " SELECT %s, %s, node_id, gpu_id, now() - make_interval(mins => %s), now() FROM gpu"
            " WHERE gpu_id = ANY(%s)",
            (job, user, started_min_ago, gpu_ids),
        )


def cycle(dsn: str, engine: AlertEngine, at: dt.datetime) -> None:
    """One evaluation of every rule group at `at`; no rule may fail."""

    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            results = await engine.cycle(conn, at)
        assert [r.error for r in results if r.error] == []

    asyncio.run(run())
