"""An operator's hold on a node, set or lifted through the API or `gpuscope health hold`: the health loop
acts on no held node. Each change is kept in health_action, the audit trail."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import AsyncConnection


async def set_hold(conn: AsyncConnection[Any], cluster: str, node: str, held_by: str | None, now: datetime) -> bool:
    """Hold (`held_by` set) or release (None) the node; False if no such node."""
    cur = await conn.execute("SELECT node_id FROM node WHERE cluster = %s AND name = %s", [cluster, node])
    row = await cur.fetchone()
    if row is None:
        return False
    async with conn.transaction():
        await conn.execute(
            "INSERT INTO health_node (node_id, state, since, held_by, held_since)"
            " VALUES (%(node)s, 'healthy', %(now)s, %(held)s,"
            "         CASE WHEN %(held)s::text IS NULL THEN NULL ELSE %(now)s END)"
            " ON CONFLICT (node_id) DO UPDATE SET held_by = excluded.held_by, held_since = excluded.held_since",
            {"node": row[0], "now": now, "held": held_by},
        )
        detail = f"held by {held_by}" if held_by else "hold lifted"
        await conn.execute(
            "INSERT INTO health_action (at, node_id, action, scheduler, dry_run, ok, detail)"
            " VALUES (%s, %s, %s, 'none', false, true, %s)",
            [now, row[0], "hold" if held_by else "release", detail],
        )
    return True
