"""Find a node, a GPU (by six or more characters of its UUID), a job or a user by a fragment of its
name, for the dashboard's search box: case-insensitive, a few of each, exact matches first."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import Connection


@dataclass(frozen=True)
class Found:
    nodes: list[tuple[str, str, str]]  # (cluster, rack, node)
    gpus: list[tuple[str, int, str]]  # (node, gpu index, uuid)
    jobs: list[tuple[str, str | None, datetime, bool]]  # (job id, user or namespace, started, running)
    users: list[tuple[str, int]]  # (user, jobs running)

    def only_target(self) -> tuple[str, str] | None:
        """("node", name) or ("job", id) when exactly one thing was found; None otherwise."""
        found = [("node", n[2]) for n in self.nodes] + [("job", j[0]) for j in self.jobs]
        return found[0] if len(found) == 1 and not self.gpus and not self.users else None


def _like(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def search(conn: Connection[Any], text: str, limit: int = 20) -> Found:
    params = {"like": _like(text), "exact": text, "limit": limit}
    nodes = conn.execute(
        "SELECT cluster, rack, name FROM node WHERE name ILIKE %(like)s"
        " ORDER BY lower(name) = lower(%(exact)s) DESC, cluster, name LIMIT %(limit)s",
        params,
    ).fetchall()
    gpus = conn.execute(
        "SELECT n.name, g.gpu_index, g.uuid FROM gpu g JOIN node n USING (node_id)"
        " WHERE length(%(exact)s) >= 6 AND g.uuid ILIKE %(like)s"
        " ORDER BY n.name, g.gpu_index LIMIT %(limit)s",
        params,
    ).fetchall()
    jobs = conn.execute(
        "SELECT job_id, coalesce(username, namespace), min(started_at), bool_or(ended_at IS NULL)"
        " FROM job_allocation WHERE job_id ILIKE %(like)s OR workload ILIKE %(like)s"
        " GROUP BY job_id, coalesce(username, namespace)"
        " ORDER BY job_id = %(exact)s DESC, bool_or(ended_at IS NULL) DESC, min(started_at) DESC LIMIT %(limit)s",
        params,
    ).fetchall()
    users = conn.execute(
        "SELECT username, count(DISTINCT job_id) FILTER (WHERE ended_at IS NULL)::int FROM job_allocation"
        " WHERE username ILIKE %(like)s GROUP BY username ORDER BY username = %(exact)s DESC, username"
        " LIMIT %(limit)s",
        params,
    ).fetchall()
    return Found(nodes, gpus, jobs, users)
