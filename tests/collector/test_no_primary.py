"""A DSN none of whose hosts takes writes (target_session_attrs=read-write over standbys only: a Patroni
cluster with no leader), on a real server made read-only: the collector will not start and says why in
one line; the database watch of a running one calls it a standby, so ingest answers 503 at once."""

from __future__ import annotations

import asyncio
import contextlib

import psycopg
import pytest

from gpuscope.collector.store.availability import Cause, DatabaseStatus
from gpuscope.collector.store.watch import watch_database
from gpuscope.collector_process import check_database
from tests.waiting import eventually_async


@pytest.fixture
def read_only_dsn(dsn: str) -> str:
    """The test database, every session in it read-only (as on a standby), targeted read-write."""
    name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            psycopg.sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(
                psycopg.sql.Identifier(str(name))
            )
        )
    return psycopg.conninfo.make_conninfo(dsn, target_session_attrs="read-write")


def test_the_collector_will_not_start_and_says_no_host_takes_writes(read_only_dsn: str) -> None:
    with pytest.raises(RuntimeError) as raised:
        check_database(read_only_dsn)
    message = str(raised.value)
    assert message.startswith("no host of --db takes writes"), message
    assert "\n" not in message


def test_the_watch_calls_it_a_standby(read_only_dsn: str) -> None:
    async def run() -> Cause:
        status = DatabaseStatus()

        async def nothing() -> None:
            pass

        watch = asyncio.create_task(watch_database(read_only_dsn, status, nothing, every_s=0.1))
        try:
            await eventually_async(lambda: not status.current().ok, what="the watch's verdict", timeout=10)
            assert status.refuses_writes() is not None, "ingest is refused at once"
            return status.current().cause
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch

    assert asyncio.run(run()) is Cause.STANDBY
