"""Connection pools: read-only ones for the query layer's users (read API, dashboard)."""

from __future__ import annotations

from typing import Any

from psycopg_pool import ConnectionPool

# Readers run every statement in a read-only transaction: a bug in a query cannot change data.
READ_ONLY_OPTIONS = "-c default_transaction_read_only=on"


def open_read_pool(dsn: str, max_size: int = 8, timeout: float = 30.0, wait: bool = True) -> ConnectionPool[Any]:
    """Open a pool of read-only autocommit connections. `wait`: fail within `timeout` if the database is
    away; else start anyway (the dashboard shows the outage and recovers). A connection is waited for
    `timeout` at most."""
    pool: ConnectionPool[Any] = ConnectionPool(
        dsn,
        min_size=1,
        max_size=max_size,
        open=False,
        timeout=timeout,
        kwargs={"autocommit": True, "options": READ_ONLY_OPTIONS, "connect_timeout": max(2, int(timeout))},
    )
    pool.open(wait=wait, timeout=timeout)
    return pool
