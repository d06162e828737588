"""Connection pools: read-only ones for the query layer's users (read API, dashboard)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg import Connection
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool


def _read_only(conn: Connection[Any]) -> None:
    """Readers run every statement in a read-only transaction: a bug in a query cannot change data. Set
    once connected, not in the startup packet's options: libpq checks target_session_attrs=read-write (the
    setting HA guides give, to find the primary among several hosts) against the session's
    default_transaction_read_only, and would refuse every host, the primary too, as "read-only"."""
    conn.execute("SET default_transaction_read_only = on")


def open_read_pool(
    dsn: str | Callable[[], str],
    max_size: int = 8,
    timeout: float = 30.0,
    wait: bool = True,
    statement_timeout_s: float | None = None,
    reconnect_timeout: float = 5 * 60.0,
    application_name: str | None = None,
) -> ConnectionPool[Any]:
    """Open a pool of read-only autocommit connections. `wait`: fail within `timeout` if the database is
    away; else start anyway (the dashboard shows the outage and recovers). A connection is waited for
    `timeout` at most. `statement_timeout_s`: the server cancels any statement running longer
    (psycopg.errors.QueryCanceled); a transaction may lower it with SET LOCAL. `reconnect_timeout`: how
    long the pool itself retries a failed connection (with back-off) before leaving it to the next caller.
    `application_name`: what pg_stat_activity shows (unless the DSN names one). `dsn` may be a callable,
    asked at each new connection (the collector's route, collector/store/route.py)."""
    options = "" if statement_timeout_s is None else f"-c statement_timeout={max(1, round(statement_timeout_s * 1000))}"
    given = conninfo_to_dict(dsn() if callable(dsn) else dsn)
    named = {} if application_name is None or "application_name" in given else {"application_name": application_name}
    pool: ConnectionPool[Any] = ConnectionPool(
        dsn,
        min_size=1,
        max_size=max_size,
        open=False,
        timeout=timeout,
        reconnect_timeout=reconnect_timeout,
        configure=_read_only,
        kwargs={"autocommit": True, "options": options, "connect_timeout": max(2, int(timeout)), **named},
    )
    pool.open(wait=wait, timeout=timeout)
    return pool
