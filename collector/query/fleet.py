"""Fleet summary from each GPU's latest sample: how many GPUs report, and what each is doing now.

Utilisation is the wrong headline for AI clusters: a rank waiting for its peers spins in NCCL and reads
~100%. So the fleet is also split into states that say what an operator acts on, one per GPU, the first
that applies:
- unhealthy: silent (no sample within FRESH_WITHIN), down, a row remap pending or failed (it needs a
  reset or a replacement), or an XID that the shipped alert rules call critical in the last 10 minutes;
- working: in a job and active (SM activity, or utilisation where the GPU gives no SM activity, at
  least IDLE_BELOW_PCT);
- idle in a job: allocated and below that, the same test as the GpuIdleInJob rule;
- free: in no job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from psycopg import Connection, sql

FRESH_WITHIN = timedelta(minutes=2)
IDLE_BELOW_PCT = 5.0  # alerts/default_rules.yaml GpuIdleInJob
CRITICAL_XIDS = [48, 63, 64, 74, 79, 94, 95]  # alerts/default_rules.yaml GpuXidError's critical codes
XID_WITHIN = timedelta(minutes=10)


@dataclass(frozen=True)
class FleetSummary:
    gpus_known: int  # every GPU in the inventory
    gpus_reporting: int  # sampled within FRESH_WITHIN
    gpus_up: int
    mean_util_pct: float | None
    total_power_w: float | None
    running_jobs: int = 0
    nodes_known: int = 0
    gpus_unhealthy: int = 0  # the states partition gpus_known (module docstring)
    gpus_working: int = 0
    gpus_idle_in_job: int = 0
    gpus_free: int = 0
    mean_sm_active_pct: float | None = None  # over working GPUs: how hard the work drives them
    mean_tensor_active_pct: float | None = None


_STATES = """
WITH latest AS (
    SELECT g.gpu_id, s.up, s.util_pct, s.sm_active_pct, s.tensor_active_pct, s.power_w,
           s.remap_pending, s.remap_failure
    FROM gpu g CROSS JOIN LATERAL (
        SELECT up, util_pct, sm_active_pct, tensor_active_pct, power_w, remap_pending, remap_failure
        FROM gpu_sample WHERE gpu_id = g.gpu_id AND ts > now() - %(fresh)s ORDER BY ts DESC LIMIT 1
    ) AS s
), allocated AS (
    SELECT DISTINCT gpu_id FROM job_allocation WHERE ended_at IS NULL
), xid AS (
    SELECT DISTINCT gpu_id FROM event
    WHERE kind = 'xid' AND code = ANY(%(xids)s) AND ts > now() - %(xid_within)s AND gpu_id IS NOT NULL
), states AS (
    SELECT g.gpu_id, l.gpu_id IS NOT NULL AS reporting, l.up AS up_reported, l.remap_pending, l.remap_failure,
           x.gpu_id IS NOT NULL AS critical_xid, coalesce(l.up, false) AS up, l.util_pct, l.sm_active_pct,
           l.tensor_active_pct, l.power_w,
           (l.gpu_id IS NULL OR NOT l.up OR coalesce(l.remap_pending, 0) > 0 OR coalesce(l.remap_failure, 0) > 0
            OR x.gpu_id IS NOT NULL) AS unhealthy,
           a.gpu_id IS NOT NULL AS allocated,
           coalesce(l.sm_active_pct, l.util_pct) < %(idle_below)s AS idle
    FROM gpu g LEFT JOIN latest l USING (gpu_id) LEFT JOIN allocated a USING (gpu_id) LEFT JOIN xid x USING (gpu_id)
)
"""
_SUMMARY = """
SELECT count(*), count(*) FILTER (WHERE reporting), count(*) FILTER (WHERE up),
       avg(util_pct)::float8, sum(power_w::float8),  -- summed in float8: a float4 sum depends on row order
       (SELECT count(DISTINCT job_id) FROM job_allocation WHERE ended_at IS NULL),
       (SELECT count(*) FROM node),
       count(*) FILTER (WHERE unhealthy),
       count(*) FILTER (WHERE NOT unhealthy AND allocated AND idle IS NOT TRUE),
       count(*) FILTER (WHERE NOT unhealthy AND allocated AND idle),
       count(*) FILTER (WHERE NOT unhealthy AND NOT allocated),
       avg(sm_active_pct) FILTER (WHERE NOT unhealthy AND allocated AND idle IS NOT TRUE)::float8,
       avg(tensor_active_pct) FILTER (WHERE NOT unhealthy AND allocated AND idle IS NOT TRUE)::float8
FROM states
"""
_UNHEALTHY = """
SELECT n.cluster, n.rack, n.name, g.gpu_index, g.uuid,
       CASE WHEN NOT s.reporting THEN 'not reporting' WHEN NOT s.up_reported THEN 'down'
            WHEN coalesce(s.remap_failure, 0) > 0 THEN 'row remap failed'
            WHEN coalesce(s.remap_pending, 0) > 0 THEN 'row remap pending: needs a reset'
            ELSE 'critical XID in the last 10 minutes' END
FROM states s JOIN gpu g USING (gpu_id) JOIN node n USING (node_id)
WHERE s.unhealthy ORDER BY n.cluster, n.name, g.gpu_index LIMIT %(unhealthy_limit)s
"""
_IDLE_JOBS = """
SELECT DISTINCT a.job_id FROM states s JOIN job_allocation a ON a.gpu_id = s.gpu_id AND a.ended_at IS NULL
WHERE NOT s.unhealthy AND s.idle ORDER BY 1 LIMIT %(idle_limit)s
"""
_SUMMARY_SQL, _UNHEALTHY_SQL, _IDLE_JOBS_SQL = (
    sql.SQL("{states}{query}").format(states=sql.SQL(_STATES), query=sql.SQL(query))
    for query in (_SUMMARY, _UNHEALTHY, _IDLE_JOBS)
)

# The three at once, the states computed once (a CTE read three times is materialized once): the
# overview asks for all three at every refresh, and each alone reads every GPU's latest sample. The
# lists come as JSON (a row each would repeat the summary), in the order their queries give.
_OVERVIEW_SQL = sql.SQL(
    """{states}, summary AS ({summary}), unhealthy AS ({unhealthy}), idle_jobs AS ({idle})
SELECT summary.*,
       (SELECT coalesce(json_agg(u ORDER BY u.cluster, u.name, u.gpu_index), '[]')::text FROM unhealthy u),
       (SELECT coalesce(json_agg(i.job_id ORDER BY i.job_id), '[]')::text FROM idle_jobs i)
FROM summary
"""
).format(
    states=sql.SQL(_STATES.rstrip()),
    summary=sql.SQL(_SUMMARY),
    unhealthy=sql.SQL(_UNHEALTHY),
    idle=sql.SQL(_IDLE_JOBS),
)


@dataclass(frozen=True)
class UnhealthyGpu:
    cluster: str
    rack: str
    node: str
    gpu_index: int
    uuid: str
    reason: str


_PARAMS = {"fresh": FRESH_WITHIN, "xids": CRITICAL_XIDS, "xid_within": XID_WITHIN, "idle_below": IDLE_BELOW_PCT}


def fleet_summary(conn: Connection[Any]) -> FleetSummary:
    row = conn.execute(_SUMMARY_SQL, _PARAMS).fetchone()
    assert row is not None
    return FleetSummary(*row)


def unhealthy_gpus(conn: Connection[Any], limit: int = 50) -> list[UnhealthyGpu]:
    """The GPUs fleet_summary counts as unhealthy, each with its first reason, by node."""
    rows = conn.execute(_UNHEALTHY_SQL, {**_PARAMS, "unhealthy_limit": limit}).fetchall()
    return [UnhealthyGpu(*row) for row in rows]


def jobs_with_idle_gpus(conn: Connection[Any], limit: int = 2) -> list[str]:
    """The running jobs holding the GPUs fleet_summary counts as idle in a job (at most `limit`, by id)."""
    return [row[0] for row in conn.execute(_IDLE_JOBS_SQL, {**_PARAMS, "idle_limit": limit}).fetchall()]


def fleet_overview(
    conn: Connection[Any], unhealthy_limit: int = 50, idle_limit: int = 2
) -> tuple[FleetSummary, list[UnhealthyGpu], list[str]]:
    """fleet_summary, unhealthy_gpus and jobs_with_idle_gpus in one statement, the states read once."""
    params = {**_PARAMS, "unhealthy_limit": unhealthy_limit, "idle_limit": idle_limit}
    row = conn.execute(_OVERVIEW_SQL, params).fetchone()
    assert row is not None
    *summary, unhealthy, idle_jobs = row
    return FleetSummary(*summary), [UnhealthyGpu(*gpu.values()) for gpu in json.loads(unhealthy)], json.loads(idle_jobs)
