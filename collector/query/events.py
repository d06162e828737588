"""Events (XID errors, GPUs lost and back, and later stragglers and alerts), newest first."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import Connection

from gpuscope.collector.query.timerange import TimeRange


@dataclass(frozen=True)
class EventRow:
    ts: datetime
    cluster: str
    rack: str
    node: str
    gpu: int | None  # index on the node; None: the node itself
    uuid: str | None
    kind: str
    code: int | None
    count: int
    message: str | None


def events(
    conn: Connection[Any],
    time_range: TimeRange,
    kinds: Sequence[str] = (),
    cluster: str | None = None,
    node: str | None = None,
    limit: int = 1000,
) -> list[EventRow]:
    rows = conn.execute(
        "SELECT e.ts, n.cluster, n.rack, n.name, g.gpu_index, g.uuid, e.kind, e.code, e.count, e.message"
        " FROM event e JOIN node n USING (node_id) LEFT JOIN gpu g USING (gpu_id)"
        " WHERE e.ts >= %(start)s AND e.ts < %(end)s"
        "   AND (cardinality(%(kinds)s::text[]) = 0 OR e.kind = ANY(%(kinds)s))"
        "   AND (%(cluster)s::text IS NULL OR n.cluster = %(cluster)s)"
        "   AND (%(node)s::text IS NULL OR n.name = %(node)s)"
        " ORDER BY e.ts DESC, e.event_id DESC LIMIT %(limit)s",
        {
            "start": time_range.start,
            "end": time_range.end,
            "kinds": list(kinds),
            "cluster": cluster,
            "node": node,
            "limit": limit,
        },
    ).fetchall()
    return [EventRow(*row) for row in rows]
