"""One collector at a time: whoever holds a PostgreSQL advisory lock on its own connection leads (the
alert engine, the health loop); the others retry, and take over once that connection goes (the lock
goes with the session, so a crashed leader frees it). A sharded task (the straggler watch) is led shard
by shard, each by whichever collector holds that shard's lock (core/shards.py)."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg import AsyncConnection

from gpuscope.core.shards import ShardLease

log = logging.getLogger(__name__)


Dsn = str | Callable[[], str]  # a callable is asked at each connection (the collector's route)


def resolve(dsn: Dsn) -> str:
    return dsn() if callable(dsn) else dsn


async def lead_when_free(
    dsn: Dsn, lock_key: int, lead: Callable[[AsyncConnection[Any]], Awaitable[None]], what: str, retry_s: float
) -> None:
    """Forever: take the lock when free and run `lead` on that connection until it fails; log, wait
    `retry_s`, try again. Database trouble and bugs alike end only this attempt, never the task."""

    async def attempt(conn: AsyncConnection[Any]) -> None:
        cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (lock_key,))
        row = await cur.fetchone()
        if row and row[0]:
            log.info("this collector runs the %s", what)
            await lead(conn)

    await _forever(dsn, what, retry_s, attempt)


async def lead_shards(
    dsn: Dsn, base_key: int, lead: Callable[[ShardLease], Awaitable[None]], what: str, retry_s: float
) -> None:
    """Forever: join the task's members on a connection of its own and run `lead` with the lease (it
    rebalances between rounds, core/shards.py) until it fails; log, wait `retry_s`, join again. The
    shards go with the connection, to the other members."""

    async def attempt(conn: AsyncConnection[Any]) -> None:
        lease = ShardLease(conn, base_key, what)
        await lease.join()
        await lead(lease)

    await _forever(dsn, what, retry_s, attempt)


async def _forever(
    dsn: Dsn, what: str, retry_s: float, attempt: Callable[[AsyncConnection[Any]], Awaitable[None]]
) -> None:
    """`attempt` on a connection of its own, again after `retry_s` whenever it ends or fails."""
    while True:
        try:
            # Named after the process, so pg_stat_activity tells which collector leads.
            name = f"gpuscope {what} pid {os.getpid()}"
            async with await psycopg.AsyncConnection.connect(
                resolve(dsn), autocommit=True, application_name=name
            ) as conn:
                await attempt(conn)
        except psycopg.Error as exc:
            log.warning("%s interrupted (will retry): %s", what, exc)
        except Exception:  # a bug must not end it for good: log it and start over
            log.exception("%s failed (will retry)", what)
        await asyncio.sleep(retry_s)
