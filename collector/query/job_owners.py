"""Who ran jobs in a time range: the users and the Kubernetes namespaces, for the jobs list's filters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import Connection

from gpuscope.collector.query.timerange import TimeRange


@dataclass(frozen=True)
class JobOwners:
    users: list[str]
    namespaces: list[str]


def job_owners(conn: Connection[Any], time_range: TimeRange, limit: int = 1000) -> JobOwners:
    """Users and namespaces of the jobs that held GPUs at some point in the range, sorted."""
    rows = conn.execute(
        "SELECT 'user', username FROM job_allocation WHERE username IS NOT NULL"
        "   AND started_at < %(end)s AND coalesce(ended_at, 'infinity') >= %(start)s GROUP BY 2"
        " UNION ALL SELECT 'namespace', namespace FROM job_allocation WHERE namespace IS NOT NULL"
        "   AND started_at < %(end)s AND coalesce(ended_at, 'infinity') >= %(start)s GROUP BY 2"
        " ORDER BY 1, 2 LIMIT %(limit)s",
        {"start": time_range.start, "end": time_range.end, "limit": 2 * limit},
    ).fetchall()
    return JobOwners(
        users=[name for kind, name in rows if kind == "user"][:limit],
        namespaces=[name for kind, name in rows if kind == "namespace"][:limit],
    )
