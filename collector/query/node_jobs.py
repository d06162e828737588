"""The jobs a node ran in a range: who, since when, on which of its GPUs; running ones first."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import Connection

from gpuscope.collector.query.timerange import TimeRange


@dataclass(frozen=True)
class NodeJob:
    job_id: str
    user: str | None
    running: bool  # holds GPUs of the node now
    started_at: datetime  # on this node
    ended_at: datetime | None  # on this node; None while running
    gpus_now: list[int]  # indices of the GPUs it holds now
    gpus: list[int]  # indices of every GPU it held in the range
    namespace: str | None = None  # Kubernetes: its namespace and workload ("JobSet/train-7")
    workload: str | None = None


_SQL = (
    "SELECT a.job_id, min(a.username), bool_or(a.ended_at IS NULL), min(a.started_at),"
    " CASE WHEN bool_or(a.ended_at IS NULL) THEN NULL ELSE max(a.ended_at) END,"
    " coalesce(array_agg(DISTINCT g.gpu_index ORDER BY g.gpu_index) FILTER (WHERE a.ended_at IS NULL), '{}'),"
    " array_agg(DISTINCT g.gpu_index ORDER BY g.gpu_index), min(a.namespace), min(a.workload)"
    " FROM job_allocation a JOIN node n USING (node_id) JOIN gpu g USING (gpu_id)"
    " WHERE n.name = %(node)s AND a.started_at < %(end)s AND (a.ended_at IS NULL OR a.ended_at >= %(start)s)"
    " GROUP BY a.job_id"
    " ORDER BY bool_or(a.ended_at IS NULL) DESC, max(coalesce(a.ended_at, 'infinity')) DESC, min(a.started_at) DESC"
    " LIMIT %(limit)s"
)


def node_jobs(conn: Connection[Any], node: str, time_range: TimeRange, limit: int = 50) -> list[NodeJob]:
    rows = conn.execute(
        _SQL, {"node": node, "start": time_range.start, "end": time_range.end, "limit": limit}
    ).fetchall()
    return [NodeJob(*row) for row in rows]
