"""One collector at a time: whoever holds a PostgreSQL advisory lock on its own connection leads (the
straggler watch, the alert engine); the others retry, and take over once that connection goes (the
lock goes with the session, so a crashed leader frees it)."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg import AsyncConnection

log = logging.getLogger(__name__)


async def lead_when_free(
    dsn: str, lock_key: int, lead: Callable[[AsyncConnection[Any]], Awaitable[None]], what: str, retry_s: float
) -> None:
    """Forever: take the lock when free and run `lead` on that connection until it fails; log, wait
    `retry_s`, try again. Database trouble and bugs alike end only this attempt, never the task."""
    while True:
        try:
            # Named after the process, so pg_stat_activity tells which collector leads.
            name = f"gpuscope {what} pid {os.getpid()}"
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True, application_name=name) as conn:
                cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (lock_key,))
                row = await cur.fetchone()
                if row and row[0]:
                    log.info("this collector runs the %s", what)
                    await lead(conn)
        except psycopg.Error as exc:
            log.warning("%s interrupted (will retry): %s", what, exc)
        except Exception:  # a bug must not end it for good: log it and start over
            log.exception("%s failed (will retry)", what)
        await asyncio.sleep(retry_s)
