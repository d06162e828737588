"""Fleet health as stored by the health loop (health/loop.py): each node's state with its GPUs and the evidence
of its current episode, and the audit trail of transitions and actions. Sync reads for the health API
(health/api.py), /metrics (health/metrics.py) and the dashboard."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from gpuscope.collector.query.timerange import TimeRange
from gpuscope.health.model import State

EVIDENCE_SHOWN = 50  # the newest findings of a node's episode; the table holds all of them
GPU_STATES = ("healthy", "suspect", "unhealthy")
NODE_STATES = tuple(str(state) for state in State)  # the health loop's order


@dataclass(frozen=True)
class EvidenceRow:
    at: datetime
    kind: str
    gpu: int | None
    code: int | None
    severity: str
    action: str
    detail: str


@dataclass(frozen=True)
class GpuVerdict:
    gpu: int
    uuid: str
    state: str  # healthy | suspect | unhealthy: the worst finding on it this episode


@dataclass(frozen=True)
class DryRunDrain:
    """The drain a dry run recorded for an unhealthy node instead of running it: the node is in service."""

    at: datetime
    detail: str  # "would run: <the scheduler's command>"


@dataclass(frozen=True)
class NodeHealth:
    cluster: str
    node: str
    state: str
    since: datetime | None  # None: healthy since it was first seen, never judged
    reason: str
    held_by: str | None
    gpus: list[GpuVerdict]
    evidence: list[EvidenceRow]
    would_drain: DryRunDrain | None = None  # unhealthy, not held, and a dry run recorded its drain


@dataclass(frozen=True)
class TransitionRow:
    at: datetime
    cluster: str
    node: str
    from_state: str
    to_state: str
    reason: str
    actor: str


def health_nodes(
    conn: psycopg.Connection[Any],
    cluster: str | None = None,
    state: str | None = None,
    with_healthy: bool = True,
    node: str | None = None,
) -> list[NodeHealth]:
    """Every node (or those of `cluster`, in `state`, named `node`), the least healthy first. A node's
    episode starts at its last return to healthy: the evidence since then explains its state. A dry run's
    drain counts while the node is still unhealthy from then on (health/loop.py)."""
    rows = conn.execute(
        "WITH nodes AS ("
        "  SELECT n.node_id, n.cluster, n.name, coalesce(h.state, 'healthy') AS state, h.since,"
        "         coalesce(h.reason, '') AS reason, h.held_by,"
        "         (SELECT max(t.at) FROM health_transition t"
        "          WHERE t.node_id = n.node_id AND t.to_state = 'healthy') AS episode"
        "  FROM node n LEFT JOIN health_node h USING (node_id)"
        "  WHERE (%(cluster)s::text IS NULL OR n.cluster = %(cluster)s)"
        "    AND (%(node)s::text IS NULL OR n.name = %(node)s)"
        "    AND (%(state)s::text IS NULL OR coalesce(h.state, 'healthy') = %(state)s)"
        "    AND (%(healthy)s OR coalesce(h.state, 'healthy') <> 'healthy'))"
        " SELECT x.node_id, x.cluster, x.name, x.state, x.since, x.reason, x.held_by, x.episode,"
        "   coalesce(g.indices, '{}'), coalesce(g.uuids, '{}'), d.at, d.detail"
        " FROM nodes x LEFT JOIN LATERAL (SELECT array_agg(gpu_index ORDER BY gpu_index) AS indices,"
        "                                        array_agg(uuid ORDER BY gpu_index) AS uuids"
        "                                 FROM gpu WHERE gpu.node_id = x.node_id) g ON true"
        " LEFT JOIN LATERAL (SELECT a.at, a.detail FROM health_action a"
        "                    WHERE x.state = 'unhealthy' AND x.held_by IS NULL AND a.node_id = x.node_id"
        "                      AND a.at >= x.since AND a.action = 'drain' AND a.dry_run"
        "                    ORDER BY a.at DESC LIMIT 1) d ON true"
        " ORDER BY array_position(ARRAY['unhealthy', 'drained', 'validating', 'suspect', 'healthy'], x.state),"
        "          x.since DESC NULLS LAST, x.cluster, x.name",
        {"cluster": cluster, "node": node, "state": state, "healthy": with_healthy},
    ).fetchall()
    troubled = {row[0]: row[7] for row in rows if row[3] != "healthy"}
    evidence = _evidence(conn, troubled)
    out = []
    for node_id, cluster_, name, state_, since, reason, held_by, _, indices, uuids, drain_at, drain in rows:
        found = evidence.get(node_id, [])
        worst: dict[int, str] = {}
        for item in found:
            if item.gpu is not None and item.severity != "ignore":
                worst[item.gpu] = max(worst.get(item.gpu, "healthy"), item.severity, key=GPU_STATES.index)
        gpus = [GpuVerdict(i, u, worst.get(i, "healthy")) for i, u in zip(indices, uuids, strict=True)]
        would_drain = DryRunDrain(drain_at, drain) if drain_at is not None else None
        out.append(
            NodeHealth(cluster_, name, state_, since, reason, held_by, gpus, found[:EVIDENCE_SHOWN], would_drain)
        )
    return out


def _evidence(conn: psycopg.Connection[Any], episodes: dict[int, datetime | None]) -> dict[int, list[EvidenceRow]]:
    """Each node's findings since its episode began (None: since it was first seen; '-infinity' stays in SQL,
    Python's datetime cannot hold it)."""
    if not episodes:
        return {}
    rows = conn.execute(
        "SELECT e.node_id, e.at, e.kind, g.gpu_index, e.code, e.severity, e.action, e.detail"
        " FROM health_evidence e JOIN unnest(%s::int[], %s::timestamptz[]) AS x (node_id, episode)"
        "   ON x.node_id = e.node_id AND e.at > coalesce(x.episode, '-infinity')"
        " LEFT JOIN gpu g ON g.gpu_id = e.gpu_id ORDER BY e.node_id, e.at DESC",
        [list(episodes), list(episodes.values())],
    ).fetchall()
    found: dict[int, list[EvidenceRow]] = {}
    for node_id, *rest in rows:
        found.setdefault(node_id, []).append(EvidenceRow(*rest))
    return found


def health_transitions(conn: psycopg.Connection[Any], span: TimeRange, limit: int = 10_000) -> list[TransitionRow]:
    rows = conn.execute(
        "SELECT t.at, n.cluster, n.name, t.from_state, t.to_state, t.reason, t.actor"
        " FROM health_transition t JOIN node n USING (node_id)"
        " WHERE t.at >= %s AND t.at < %s ORDER BY t.at DESC, t.transition_id DESC LIMIT %s",
        [span.start, span.end, limit],
    ).fetchall()
    return [TransitionRow(*row) for row in rows]


@dataclass(frozen=True)
class ActionRow:
    at: datetime
    cluster: str
    node: str
    action: str
    scheduler: str
    dry_run: bool
    ok: bool | None
    detail: str


def health_actions(conn: psycopg.Connection[Any], span: TimeRange, limit: int = 10_000) -> list[ActionRow]:
    rows = conn.execute(
        "SELECT a.at, n.cluster, n.name, a.action, a.scheduler, a.dry_run, a.ok, a.detail"
        " FROM health_action a JOIN node n USING (node_id)"
        " WHERE a.at >= %s AND a.at < %s ORDER BY a.at DESC, a.action_id DESC LIMIT %s",
        [span.start, span.end, limit],
    ).fetchall()
    return [ActionRow(*row) for row in rows]


@dataclass(frozen=True)
class OutOfHealth:
    cluster: str
    node: str
    state: str
    reason: str
    jobs: int  # jobs running on it now


def out_of_health(conn: psycopg.Connection[Any]) -> list[OutOfHealth]:
    """The nodes not healthy, with the jobs running on them: for /metrics and the alert rules."""
    rows = conn.execute(
        "SELECT n.cluster, n.name, h.state, h.reason,"
        "  (SELECT count(DISTINCT a.job_id) FROM job_allocation a WHERE a.node_id = n.node_id AND a.ended_at IS NULL)"
        " FROM health_node h JOIN node n USING (node_id) WHERE h.state <> 'healthy' ORDER BY n.cluster, n.name"
    ).fetchall()
    return [OutOfHealth(*row) for row in rows]


@dataclass(frozen=True)
class HealthCounts:
    states: dict[str, int]  # nodes per state, every state present (0 where none); never judged counts as healthy
    held: int  # nodes an operator holds, whatever their state
    recorded: bool  # whether the health loop has written anything at all (a state, a finding or an action)

    @property
    def nodes(self) -> int:
        return sum(self.states.values())


def health_counts(conn: psycopg.Connection[Any], cluster: str | None = None) -> HealthCounts:
    """How many nodes are in each state: the fleet's headline, without reading every node's GPUs."""
    rows = conn.execute(
        "SELECT coalesce(h.state, 'healthy'), count(*), count(h.held_by)"
        " FROM node n LEFT JOIN health_node h USING (node_id)"
        " WHERE %(cluster)s::text IS NULL OR n.cluster = %(cluster)s GROUP BY 1",
        {"cluster": cluster},
    ).fetchall()
    recorded = conn.execute(
        "SELECT EXISTS (SELECT FROM health_node) OR EXISTS (SELECT FROM health_evidence)"
        " OR EXISTS (SELECT FROM health_action)"
    ).fetchone()
    states = dict.fromkeys(NODE_STATES, 0) | {state: count for state, count, _ in rows}
    return HealthCounts(states, sum(held for _, _, held in rows), bool(recorded and recorded[0]))
