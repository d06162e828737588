"""Connection pools: read-only ones for the query layer's users (read API, dashboard)."""

from __future__ import annotations

from typing import Any

from psycopg_pool import ConnectionPool

# Readers run every statement in a read-only transaction: a bug in a query cannot change data.
READ_ONLY_OPTIONS = "-c default_transaction_read_only=on"


def open_read_pool(dsn: str, max_size: int = 8, timeout: float = 30.0) -> ConnectionPool[Any]:
    """Open a pool of read-only autocommit connections, failing within `timeout` if the database is away."""
    pool: ConnectionPool[Any] = ConnectionPool(
        dsn, min_size=1, max_size=max_size, open=False, kwargs={"autocommit": True, "options": READ_ONLY_OPTIONS}
    )
    pool.open(wait=True, timeout=timeout)
    return pool
