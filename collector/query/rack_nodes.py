"""One rack now: its nodes with the power they draw, and the jobs running on them. The answer to
"rack-01 is near its budget: what is in it?" (the power page's rack view)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import Connection

from gpuscope.collector.query.fleet import FRESH_WITHIN


@dataclass(frozen=True)
class RackNode:
    name: str
    gpus: int
    gpus_reporting: int  # sampled within FRESH_WITHIN
    power_w: float | None  # the reporting GPUs' newest readings summed; None: none reported
    power_limit_w: float | None
    jobs: list[str]  # running on it now


@dataclass(frozen=True)
class RackJob:
    job_id: str
    user: str | None
    nodes: int  # of this rack
    gpus: int  # of this rack


_NODES = """
WITH latest AS (
    SELECT DISTINCT ON (s.gpu_id) s.gpu_id, s.power_w, s.power_limit_w
    FROM gpu_sample s JOIN gpu g USING (gpu_id) JOIN node n USING (node_id)
    WHERE n.cluster = %(cluster)s AND n.rack = %(rack)s AND s.ts > now() - %(fresh)s
    ORDER BY s.gpu_id, s.ts DESC
)
SELECT n.name, count(g.gpu_id)::int, count(l.gpu_id)::int, sum(l.power_w)::float8, sum(l.power_limit_w)::float8,
       coalesce((SELECT array_agg(DISTINCT a.job_id ORDER BY a.job_id) FROM job_allocation a
                 WHERE a.node_id = n.node_id AND a.ended_at IS NULL), '{}')
FROM node n JOIN gpu g USING (node_id) LEFT JOIN latest l USING (gpu_id)
WHERE n.cluster = %(cluster)s AND n.rack = %(rack)s
GROUP BY n.node_id, n.name
ORDER BY sum(l.power_w) DESC NULLS LAST, n.name
"""

_JOBS = """
SELECT a.job_id, min(a.username), count(DISTINCT a.node_id)::int, count(DISTINCT a.gpu_id)::int
FROM job_allocation a JOIN node n USING (node_id)
WHERE n.cluster = %(cluster)s AND n.rack = %(rack)s AND a.ended_at IS NULL
GROUP BY a.job_id ORDER BY 4 DESC, 1
"""


def rack_nodes(conn: Connection[Any], cluster: str, rack: str) -> tuple[list[RackNode], list[RackJob]]:
    """The rack's nodes, the hungriest first, and the jobs on them now, the widest first."""
    params = {"cluster": cluster, "rack": rack, "fresh": FRESH_WITHIN}
    nodes = [RackNode(*row) for row in conn.execute(_NODES, params).fetchall()]
    jobs = [RackJob(*row) for row in conn.execute(_JOBS, params).fetchall()]
    return nodes, jobs
