"""What stragglers cost over a span, by job, node, cause or user: the GPU-hours lost
(stragglers/reads.py says how an episode's cost is reckoned). An episode that runs past
either end of the span counts only for the part inside it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from psycopg import Connection, sql

from gpuscope.collector.query.timerange import TimeRange
from gpuscope.stragglers.reads import JOB_HELD, lost_gpu_hours

CostDimension = Literal["job", "node", "cause", "user"]
_KEYS: dict[str, sql.SQL] = {
    "job": sql.SQL("s.job_id"),
    # node names are a cluster's own; a finding about the whole job (the fabric) is nobody's node
    "node": sql.SQL("coalesce(n.cluster || '/' || n.name, s.cluster || ': the fabric')"),
    "cause": sql.SQL("s.cause"),
    "user": sql.SQL("held.username"),
}


@dataclass(frozen=True)
class CostRow:
    key: str | None  # None: a job whose owner the scheduler never said (by user)
    episodes: int
    jobs: int
    gpu_hours_lost: float


@dataclass(frozen=True)
class CostReport:
    by: CostDimension
    rows: list[CostRow]  # most costly first
    episodes: int
    gpu_hours_lost: float


def straggler_cost(conn: Connection[Any], span: TimeRange, by: CostDimension) -> CostReport:
    inside = lost_gpu_hours(
        sql.SQL("greatest(s.started_at, %(start)s)"), sql.SQL("least(coalesce(s.ended_at, now()), %(end)s)")
    )
    query = sql.SQL(
        "SELECT {key}, count(*)::int, count(DISTINCT s.job_id)::int, coalesce(sum({inside}), 0)"
        " FROM straggler s LEFT JOIN node n ON n.node_id = s.node_id"
        " CROSS JOIN LATERAL ({held}) held"
        " WHERE s.started_at < %(end)s AND coalesce(s.ended_at, 'infinity') > %(start)s"
        " GROUP BY 1 ORDER BY 4 DESC, 1"
    ).format(key=_KEYS[by], inside=inside, held=JOB_HELD)
    rows = [CostRow(*row) for row in conn.execute(query, {"start": span.start, "end": span.end}).fetchall()]
    return CostReport(by, rows, sum(r.episodes for r in rows), sum(r.gpu_hours_lost for r in rows))
