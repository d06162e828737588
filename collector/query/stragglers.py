"""Stragglers the detector declared (stragglers/, the watch), newest first."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import Connection

from gpuscope.collector.query.timerange import TimeRange


@dataclass(frozen=True)
class StragglerRow:
    job_id: str
    cluster: str
    rack: str
    node: str
    gpu: int | None  # index on the node; None: the node itself
    uuid: str | None
    nic: str | None  # the port's device (a slow NIC on a node with several), e.g. mlx5_3; None otherwise
    port: int | None
    cause: str
    slowdown: float
    evidence: dict[str, float]
    started_at: datetime
    declared_at: datetime
    ended_at: datetime | None

    @property
    def culprit(self) -> str:
        """Where, for people: "node7 GPU 3", "node7 NIC mlx5_3 port 1" or "node7"."""
        if self.gpu is not None:
            return f"{self.node} GPU {self.gpu}"
        if self.nic is not None:
            return f"{self.node} NIC {self.nic} port {self.port}"
        return self.node


def stragglers(
    conn: Connection[Any], time_range: TimeRange, job: str | None = None, active_only: bool = False, limit: int = 1000
) -> list[StragglerRow]:
    """Stragglers active at some point in the range (still active ones included)."""
    rows = conn.execute(
        "SELECT s.job_id, n.cluster, n.rack, n.name, g.gpu_index, g.uuid, p.device, p.port, s.cause,"
        "       s.slowdown::float8, s.evidence, s.started_at, s.declared_at, s.ended_at"
        " FROM straggler s JOIN node n ON n.node_id = s.node_id LEFT JOIN gpu g ON g.gpu_id = s.gpu_id"
        " LEFT JOIN ib_port p ON p.port_id = s.port_id"
        " WHERE s.started_at < %(end)s AND coalesce(s.ended_at, 'infinity') >= %(start)s"
        "   AND (%(job)s::text IS NULL OR s.job_id = %(job)s) AND (NOT %(active)s OR s.ended_at IS NULL)"
        " ORDER BY s.started_at DESC, s.straggler_id DESC LIMIT %(limit)s",
        {"start": time_range.start, "end": time_range.end, "job": job, "active": active_only, "limit": limit},
    ).fetchall()
    return [StragglerRow(*row) for row in rows]
