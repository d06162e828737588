"""The database watch: one connection of its own, asking every second whether the server is in
recovery, so an outage is known within a couple of seconds whether or not anyone writes, and its end is
known at once. A server in recovery is a standby (after a failover, or a DSN naming the wrong host): it
counts as away for writes, and the watch connects afresh through the DSN each second, which finds the
primary wherever a multi-host DSN lists it (target_session_attrs=read-write or primary).

When an outage ends, the pools drop every connection they hold (drain): those that broke meanwhile would
fail the first batches on a dead socket, and those on a demoted server would be refused.

A server can go and come back between two probes (an embedded server restarted by its supervisor in
under a second). The watch's own connection is then broken though the server is up: the probe tries a
fresh one before it calls the database away, and drains the pools all the same, since theirs broke too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from gpuscope.collector.store.availability import DatabaseStatus, StandbyDatabase

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 2.0  # a server that has not answered `SELECT 1` in this long is not taking writes either


async def watch_database(
    dsn: str, status: DatabaseStatus, on_recovery: Callable[[], Awaitable[None]], every_s: float = 1.0
) -> None:
    # The probe runs as a task of its own, and is never cancelled: cancelling a query on a server that
    # does not answer makes psycopg wait for the cancel request too. A probe that is late marks the
    # database unreachable; the next one starts only once it has finished (or failed).
    probe: asyncio.Task[tuple[psycopg.AsyncConnection[Any], bool]] | None = None
    conn: psycopg.AsyncConnection[Any] | None = None
    try:
        while True:
            if probe is None:
                probe = asyncio.create_task(_probe(dsn, conn), name="database probe")
            done, _ = await asyncio.wait({probe}, timeout=PROBE_TIMEOUT_S)
            if not done:
                _failed(status, TimeoutError(f"no answer to a probe in {PROBE_TIMEOUT_S:g} s"))
            else:
                try:
                    conn, reconnected = probe.result()
                except (psycopg.Error, OSError) as exc:
                    _failed(status, exc)
                    conn = None
                else:
                    recovered = status.reachable()
                    if recovered:
                        log.warning("database reachable again: ingest resumes")
                    elif reconnected:
                        log.warning("the database server went and came back between two probes")
                    if recovered or reconnected:
                        try:
                            await on_recovery()
                        except Exception:  # gone again, say: the next probe tells; the watch goes on
                            log.exception("dropping pooled connections failed")
                probe = None
            await asyncio.sleep(every_s)
    finally:
        if probe is not None:
            probe.cancel()
        await _discard(conn)


async def _probe(dsn: str, conn: psycopg.AsyncConnection[Any] | None) -> tuple[psycopg.AsyncConnection[Any], bool]:
    """Whether the server behind the watch's connection (a new one if it has none or it broke) is the
    primary: the connection, and whether the one it had broke on a server that is up again. A standby:
    StandbyDatabase, the connection discarded."""
    if conn is not None and not conn.closed:
        try:
            return await _ask(conn), False
        except StandbyDatabase:
            raise
        except (psycopg.OperationalError, OSError):  # broken: is the server away, or back already?
            pass
        return await _ask(await _connect(dsn)), True
    return await _ask(await _connect(dsn)), False


async def _ask(conn: psycopg.AsyncConnection[Any]) -> psycopg.AsyncConnection[Any]:
    try:
        cur = await conn.execute("SELECT pg_is_in_recovery()")
        row = await cur.fetchone()
        if row is not None and row[0]:
            host = conn.info.host
            raise StandbyDatabase(f"{host}:{conn.info.port} is in recovery and takes no writes")
    except BaseException:
        await _discard(conn)
        raise
    return conn


def _failed(status: DatabaseStatus, exc: BaseException) -> None:
    before = status.current()
    after = status.failed(exc)
    if before.ok and not after.ok:
        log.error("%s", after.reason)


async def _connect(dsn: str) -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(
        dsn, autocommit=True, connect_timeout=int(PROBE_TIMEOUT_S), application_name="gpuscope database watch"
    )


async def _discard(conn: psycopg.AsyncConnection[Any] | None) -> None:
    if conn is not None:
        with contextlib.suppress(psycopg.Error, TimeoutError, OSError):
            await asyncio.wait_for(conn.close(), 1.0)
