"""Health episodes written straight into a test database, as the health loop (health/episodes.py) would
have left them, for the tests of their reads, routes, command and page."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg


def add_episode(
    conn: psycopg.Connection[Any],
    node_id: int,
    cause: str,
    started: datetime,
    out: datetime | None,
    back: datetime | None,
    outcome: str,
    **more: Any,
) -> int:
    """One health_episode row (`more`: any other column, e.g. repair="reset_gpu"); its id."""
    columns = {"node_id": node_id, "cause": cause, "cause_detail": f"{cause} in words", "started_at": started,
               "out_at": out, "back_at": back, "outcome": outcome, **more}  # fmt: skip
    row = conn.execute(
        f"INSERT INTO health_episode ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})"  # noqa: S608 (column names are the test's own)
        " RETURNING episode_id",
        list(columns.values()),
    ).fetchone()
    assert row is not None
    return int(row[0])
