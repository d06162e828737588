"""Daily partitions on plain PostgreSQL: the upgrade that moves existing rows, maintenance ahead,
retention, partitions made on demand for late data, and data older than retention refused."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
from psycopg import sql

from gpuscope.collector.store import partitions
from gpuscope.collector.store.migrate import migrate
from tests.collector.helpers import batch_at, post
from tests.conftest import count_rows
from tests.processes import RunningCollector

_names = itertools.count()


def fresh_database(postgres_dsn: str) -> str:
    name = f"part_{uuid.uuid4().hex[:8]}_{next(_names)}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return postgres_dsn.rsplit("/", 1)[0] + "/" + name


def days_of(dsn: str, table: str = "gpu_sample") -> set:
    async def run() -> set:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            return await partitions.existing_days(conn, table)

    return asyncio.run(run())


def maintain(dsn: str, retention: timedelta, now: datetime) -> list[str]:
    async def run() -> list[str]:
        async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
            return await partitions.maintain(conn, retention, now)

    return asyncio.run(run())


def test_upgrade_moves_existing_rows_into_daily_partitions(postgres) -> None:  # type: ignore[no-untyped-def]
    dsn = fresh_database(postgres.dsn)
    migrate(dsn, up_to=3)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for day, hour in ((1, 23), (2, 0), (2, 5)):
            conn.execute(
                "INSERT INTO gpu_sample (ts, gpu_id, up, util_pct) VALUES (%s, 1, true, 50)",
                (datetime(2026, 10, day, hour, 30, tzinfo=UTC),),
            )
    assert migrate(dsn, up_to=4) == [4]
    assert count_rows(dsn, "gpu_sample") == 3
    assert days_of(dsn) == {datetime(2026, 10, 1).date(), datetime(2026, 10, 2).date()}
    with psycopg.connect(dsn) as conn:
        kind = conn.execute("SELECT relkind FROM pg_class WHERE relname = 'gpu_sample'").fetchone()
        indexes = conn.execute("SELECT count(*) FROM pg_indexes WHERE tablename = 'gpu_sample_p20261002'").fetchone()
    assert kind == ("p",) and indexes == (2,), "partitioned, and each partition gets the parent's indexes"


def test_maintenance_creates_ahead_and_drops_past_retention(dsn: str) -> None:
    now = datetime(2026, 11, 20, 12, tzinfo=UTC)
    maintain(dsn, timedelta(days=30), now - timedelta(days=5))  # run five days ago: the 15th, 16th and 17th
    assert maintain(dsn, timedelta(days=3), now) == [
        f"{table}_p{day:%Y%m%d}"
        for table in partitions.TABLES
        for day in (datetime(2026, 11, 15), datetime(2026, 11, 16))
    ]
    days = {datetime(2026, 11, d).date() for d in (17, 20, 21, 22)}
    assert days_of(dsn) == days, "the 17th is within 3 days of noon on the 20th; today and 2 days ahead exist"
    assert days_of(dsn, "ib_port_sample") == days


def test_late_data_gets_its_partition_and_data_past_retention_is_refused(collector: RunningCollector) -> None:
    three_days_ago = time.time() - 3 * 86400
    assert post(collector, batch_at(three_days_ago, 1)).status_code == 200
    assert datetime.fromtimestamp(three_days_ago, UTC).date() in days_of(collector.dsn)
    assert count_rows(collector.dsn, "gpu_sample") == 2
    too_old = post(collector, batch_at(time.time() - 31 * 86400, 2))
    assert too_old.status_code == 422 and "retention" in too_old.json()["detail"][0]["msg"]
