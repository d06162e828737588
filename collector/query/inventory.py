"""Which GPUs and IB ports a question is about: by node, by UUID, by job; with their labels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import Connection


@dataclass(frozen=True)
class GpuRow:
    gpu_id: int
    cluster: str
    rack: str
    node: str
    gpu_index: int
    uuid: str

    @property
    def label(self) -> str:
        return f"{self.rack}/{self.node}/gpu{self.gpu_index}"


@dataclass(frozen=True)
class PortRow:
    port_id: int
    cluster: str
    rack: str
    node: str
    device: str
    port: int

    @property
    def label(self) -> str:
        return f"{self.node}/{self.device}:{self.port}"


def gpu_rows(conn: Connection[Any], gpu_ids: Sequence[int]) -> list[GpuRow]:
    """Labels for these GPUs, ordered by cluster, rack, node and index (the order every chart uses)."""
    rows = conn.execute(
        "SELECT g.gpu_id, n.cluster, n.rack, n.name, g.gpu_index, g.uuid"
        " FROM gpu g JOIN node n USING (node_id) WHERE g.gpu_id = ANY(%s)"
        " ORDER BY n.cluster, n.rack, n.name, g.gpu_index",
        (list(gpu_ids),),
    ).fetchall()
    return [GpuRow(*row) for row in rows]


def select_gpus(
    conn: Connection[Any],
    cluster: str | None = None,
    node: str | None = None,
    uuid: str | None = None,
    job: str | None = None,
) -> list[int]:
    """GPU ids matching every filter given (a job: every GPU it was ever allocated)."""
    rows = conn.execute(
        "SELECT g.gpu_id FROM gpu g JOIN node n USING (node_id)"
        " WHERE (%(cluster)s::text IS NULL OR n.cluster = %(cluster)s)"
        "   AND (%(node)s::text IS NULL OR n.name = %(node)s)"
        "   AND (%(uuid)s::text IS NULL OR g.uuid = %(uuid)s)"
        "   AND (%(job)s::text IS NULL OR g.gpu_id IN (SELECT gpu_id FROM job_allocation WHERE job_id = %(job)s))"
        " ORDER BY 1",
        {"cluster": cluster, "node": node, "uuid": uuid, "job": job},
    ).fetchall()
    return [gpu_id for (gpu_id,) in rows]


def select_ports(conn: Connection[Any], cluster: str | None = None, nodes: Sequence[str] = ()) -> list[PortRow]:
    rows = conn.execute(
        "SELECT p.port_id, n.cluster, n.rack, n.name, p.device, p.port FROM ib_port p JOIN node n USING (node_id)"
        " WHERE (%(cluster)s::text IS NULL OR n.cluster = %(cluster)s)"
        "   AND (cardinality(%(nodes)s::text[]) = 0 OR n.name = ANY(%(nodes)s))"
        " ORDER BY n.cluster, n.rack, n.name, p.device, p.port",
        {"cluster": cluster, "nodes": list(nodes)},
    ).fetchall()
    return [PortRow(*row) for row in rows]


def inventory_counts(conn: Connection[Any]) -> tuple[int, int]:
    """How many GPUs and nodes the store knows."""
    row = conn.execute("SELECT (SELECT count(*) FROM gpu), (SELECT count(*) FROM node)").fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def rack_count(conn: Connection[Any]) -> int:
    """How many racks (cluster, rack) the store knows."""
    row = conn.execute("SELECT count(*) FROM (SELECT DISTINCT cluster, rack FROM node) AS racks").fetchone()
    return int(row[0]) if row else 0
