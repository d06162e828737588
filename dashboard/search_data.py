"""The search page's read: nodes, GPUs, jobs and users whose names hold the text (collector/query/search.py)."""

from __future__ import annotations

from typing import Any

from psycopg_pool import ConnectionPool

from gpuscope.collector.query.search import Found, search


def load_found(pool: ConnectionPool[Any], text: str) -> Found:
    with pool.connection() as conn:
        return search(conn, text)
