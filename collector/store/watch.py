"""The database watch: one connection of its own, `SELECT 1` every second, so an outage is known within
a couple of seconds whether or not anyone writes, and its end is known at once.

When an outage ends, the pools drop connections that broke meanwhile (pool.check()), so the first
batches after it do not fail on a dead socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from gpuscope.collector.store.availability import DatabaseStatus

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 2.0  # a server that has not answered `SELECT 1` in this long is not taking writes either


async def watch_database(
    dsn: str, status: DatabaseStatus, on_recovery: Callable[[], Awaitable[None]], every_s: float = 1.0
) -> None:
    conn: psycopg.AsyncConnection[Any] | None = None
    try:
        while True:
            try:
                if conn is None or conn.closed:
                    conn = await asyncio.wait_for(_connect(dsn), PROBE_TIMEOUT_S + 1)
                await asyncio.wait_for(conn.execute("SELECT 1"), PROBE_TIMEOUT_S)
            except (psycopg.Error, TimeoutError, OSError) as exc:
                before = status.current()
                after = status.failed(exc if not isinstance(exc, TimeoutError) else TimeoutError("no answer in 2 s"))
                if before.ok and not after.ok:
                    log.error("database %s", after.reason)
                conn = await _discard(conn)
            else:
                if status.reachable():
                    log.warning("database reachable again: ingest resumes")
                    await on_recovery()
            await asyncio.sleep(every_s)
    finally:
        await _discard(conn)


async def _connect(dsn: str) -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(
        dsn, autocommit=True, connect_timeout=int(PROBE_TIMEOUT_S), application_name="gpuscope database watch"
    )


async def _discard(conn: psycopg.AsyncConnection[Any] | None) -> None:
    if conn is not None:
        with contextlib.suppress(psycopg.Error, TimeoutError, OSError):
            await asyncio.wait_for(conn.close(), 1.0)
    return None
