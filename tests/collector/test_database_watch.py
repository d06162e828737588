"""The database watch against a real server: its own connection broken while the server is up (a server
that went and came back between two probes) is not an outage, and the pools are drained all the same."""

from __future__ import annotations

import asyncio
import contextlib

import psycopg

from gpuscope.collector.store.availability import Cause, DatabaseStatus
from gpuscope.collector.store.watch import watch_database
from tests.waiting import eventually_async


def test_a_connection_broken_between_probes_is_no_outage(dsn: str) -> None:
    asyncio.run(_broken_between_probes(dsn))


def test_a_server_that_is_away_is_still_an_outage() -> None:
    asyncio.run(_away())


async def _broken_between_probes(dsn: str) -> None:
    status = DatabaseStatus()
    drained: list[float] = []
    seen: list[Cause] = []

    async def on_recovery() -> None:
        drained.append(asyncio.get_running_loop().time())

    watch = asyncio.create_task(watch_database(dsn, status, on_recovery, every_s=0.1))
    try:
        await eventually_async(lambda: _watch_connected(dsn), what="the watch's connection", timeout=10)
        assert status.current().ok
        # Its backend ended under it, as a restarted server's would be; the server itself stays up.
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                ("gpuscope database watch",),
            )
        for _ in range(20):  # two seconds of probes, every state seen
            seen.append(status.current().cause)
            await asyncio.sleep(0.1)
        assert set(seen) == {Cause.OK}, seen
        assert drained, "the pools were not drained though the watch's connection broke"
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch


async def _away() -> None:
    status = DatabaseStatus()

    async def on_recovery() -> None:
        pass

    # Nothing listens on port 9 of loopback: refused at once.
    watch = asyncio.create_task(watch_database("postgresql://127.0.0.1:9/x", status, on_recovery, every_s=0.1))
    try:
        await eventually_async(lambda: not status.current().ok, what="the outage noticed", timeout=5)
        assert status.current().cause is Cause.UNREACHABLE
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch


def _watch_connected(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", ("gpuscope database watch",)
        ).fetchone()
    return bool(row and row[0])
