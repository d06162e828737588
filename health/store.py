"""The health loop's reads and writes: tables health_node, health_evidence, health_transition and
health_action (collector/store/migrations/0014_health.sql)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection

from gpuscope.health.ladder import INSPECT_HOLD
from gpuscope.health.model import Evidence, Severity, State, Transition

GPU_SILENT = timedelta(minutes=2)  # a GPU with no sample this long does not count as reporting up
GUARD_LOCK_KEY = 0x6770647261696E73  # "gpdrains": one drain decision at a time across collectors


@dataclass(frozen=True)
class NodeRow:
    node_id: int
    cluster: str
    name: str
    state: State
    since: datetime | None  # None: never judged (healthy since it was first seen)
    reason: str
    held_by: str | None


async def load_nodes(conn: AsyncConnection[Any]) -> dict[int, NodeRow]:
    cur = await conn.execute(
        "SELECT n.node_id, n.cluster, n.name, coalesce(h.state, 'healthy'), h.since, coalesce(h.reason, ''),"
        "       h.held_by"
        " FROM node n LEFT JOIN health_node h USING (node_id)"
    )
    return {
        row[0]: NodeRow(row[0], row[1], row[2], State(row[3]), row[4], row[5], row[6]) for row in await cur.fetchall()
    }


async def record_evidence(conn: AsyncConnection[Any], items: Sequence[Evidence]) -> list[Evidence]:
    """Store findings not stored before; returns those (a finding re-found by an overlapping window is not new)."""
    if not items:
        return []
    cur = await conn.execute(
        "INSERT INTO health_evidence (at, node_id, gpu_id, kind, code, severity, action, detail)"
        " SELECT * FROM unnest(%s::timestamptz[], %s::int[], %s::int[], %s::text[], %s::int[], %s::text[],"
        "                      %s::text[], %s::text[])"
        " ON CONFLICT DO NOTHING RETURNING node_id, coalesce(gpu_id, -1), kind, coalesce(code, -1), at",
        [
            [e.at for e in items],
            [e.node_id for e in items],
            [e.gpu_id for e in items],
            [e.kind for e in items],
            [e.code for e in items],
            [str(e.severity) for e in items],
            [e.action for e in items],
            [e.detail for e in items],
        ],
    )
    stored = {tuple(row) for row in await cur.fetchall()}
    return [e for e in items if _key(e) in stored]


def _key(e: Evidence) -> tuple[Any, ...]:
    return (e.node_id, -1 if e.gpu_id is None else e.gpu_id, e.kind, -1 if e.code is None else e.code, e.at)


@dataclass(frozen=True)
class EvidenceSummary:
    last_at: datetime  # the newest finding that counts (not "ignore")
    recent: int  # findings that count in the suspect window
    worst: str  # the detail of the newest finding of the highest severity in the window


async def evidence_summary(
    conn: AsyncConnection[Any], node_ids: Iterable[int], window_start: datetime
) -> dict[int, EvidenceSummary]:
    ids = list(node_ids)
    if not ids:
        return {}
    cur = await conn.execute(
        "SELECT node_id, max(at), count(*) FILTER (WHERE at > %s),"
        "       (array_agg(detail ORDER BY severity = 'unhealthy' DESC, at DESC))[1]"
        " FROM health_evidence WHERE node_id = ANY(%s) AND severity <> 'ignore' GROUP BY node_id",
        [window_start, ids],
    )
    return {row[0]: EvidenceSummary(row[1], row[2], row[3]) for row in await cur.fetchall()}


async def ready_to_return(conn: AsyncConnection[Any], node_ids: Iterable[int], now: datetime) -> dict[int, str]:
    """Node -> "" when every GPU of it reports up with no row remap pending, else what is missing."""
    ids = list(node_ids)
    if not ids:
        return {}
    cur = await conn.execute(
        "SELECT g.node_id, g.gpu_index, s.up, s.remap_pending FROM gpu g"
        " LEFT JOIN LATERAL (SELECT up, remap_pending FROM gpu_sample x"
        "                    WHERE x.gpu_id = g.gpu_id AND x.ts > %s AND x.ts <= %s ORDER BY x.ts DESC LIMIT 1) s"
        " ON true WHERE g.node_id = ANY(%s) ORDER BY g.node_id, g.gpu_index",
        [now - GPU_SILENT, now, ids],
    )
    missing: dict[int, list[str]] = {node_id: [] for node_id in ids}
    for node_id, index, up, pending in await cur.fetchall():
        if up is None:
            missing[node_id].append(f"GPU {index} has not reported")
        elif not up:
            missing[node_id].append(f"GPU {index} is lost")
        elif pending:
            missing[node_id].append(f"GPU {index} has a row remap pending (reset the GPU)")
    return {node_id: "; ".join(items) for node_id, items in missing.items()}


async def running_jobs(conn: AsyncConnection[Any], node_ids: Iterable[int]) -> dict[int, list[tuple[str, str | None]]]:
    ids = list(node_ids)
    if not ids:
        return {}
    cur = await conn.execute(
        "SELECT DISTINCT node_id, job_id, username FROM job_allocation"
        " WHERE ended_at IS NULL AND node_id = ANY(%s) ORDER BY node_id, job_id",
        [ids],
    )
    jobs: dict[int, list[tuple[str, str | None]]] = {}
    for node_id, job_id, user in await cur.fetchall():
        jobs.setdefault(node_id, []).append((job_id, user))
    return jobs


async def save_transition(conn: AsyncConnection[Any], move: Transition, held_by: str | None) -> None:
    await conn.execute(
        "INSERT INTO health_node (node_id, state, since, reason, held_by, held_since)"
        " VALUES (%(node)s, %(to)s, %(at)s, %(reason)s, %(held)s, CASE WHEN %(held)s::text IS NULL THEN NULL"
        "         ELSE %(at)s END)"
        " ON CONFLICT (node_id) DO UPDATE SET state = excluded.state, since = excluded.since,"
        "   reason = excluded.reason, held_by = excluded.held_by,"
        "   held_since = CASE WHEN excluded.held_by IS NULL THEN NULL"
        "                     ELSE coalesce(health_node.held_since, excluded.held_since) END",
        {"node": move.node_id, "to": str(move.to_state), "at": move.at, "reason": move.reason, "held": held_by},
    )
    await conn.execute(
        "INSERT INTO health_transition (at, node_id, from_state, to_state, reason, actor)"
        " VALUES (%s, %s, %s, %s, %s, %s)",
        [move.at, move.node_id, str(move.from_state), str(move.to_state), move.reason, str(move.actor)],
    )


async def save_reason(conn: AsyncConnection[Any], node_id: int, reason: str, held_by: str | None) -> None:
    """A new reason (a refused drain, a hold) without a change of state."""
    await conn.execute(
        "UPDATE health_node SET reason = %s, held_by = %s,"
        " held_since = CASE WHEN %s::text IS NULL THEN NULL ELSE coalesce(held_since, now()) END WHERE node_id = %s",
        [reason, held_by, held_by, node_id],
    )


async def record_action(
    conn: AsyncConnection[Any],
    at: datetime,
    node_id: int,
    action: str,
    scheduler: str,
    dry_run: bool,
    ok: bool | None,
    detail: str,
) -> None:
    await conn.execute(
        "INSERT INTO health_action (at, node_id, action, scheduler, dry_run, ok, detail)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s)",
        [at, node_id, action, scheduler, dry_run, ok, detail],
    )


async def drains_since(conn: AsyncConnection[Any], start: datetime) -> int:
    """Drains done since `start`: a dry run's drain took nothing out, so the rate limit does not count it."""
    cur = await conn.execute("SELECT count(*) FROM health_action WHERE action = 'drain' AND at > %s AND ok", [start])
    row = await cur.fetchone()
    return int(row[0]) if row else 0


@dataclass(frozen=True)
class GuardCounts:
    """What the guard rails count, over the whole fleet whoever leads which node."""

    held_out: int  # nodes gpuscope has out of service (drained or validating; held by an operator: theirs)
    fleet: int  # nodes known
    drains: int  # drains done in the last hour


async def lock_guard_rails(conn: AsyncConnection[Any]) -> None:
    """Serialize "count, decide, drain, record" across collectors until this transaction ends: two health
    loops leading different nodes must not both take the last drain the policy allows."""
    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (GUARD_LOCK_KEY,))


async def guard_counts(conn: AsyncConnection[Any], hour_ago: datetime) -> GuardCounts:
    cur = await conn.execute(
        "SELECT (SELECT count(*) FROM health_node WHERE state IN ('drained', 'validating')"
        "        AND (held_by IS NULL OR starts_with(held_by, %s))),"
        "       (SELECT count(*) FROM node)",
        [INSPECT_HOLD],
    )
    row = await cur.fetchone()
    assert row is not None
    return GuardCounts(int(row[0]), int(row[1]), await drains_since(conn, hour_ago))


async def dry_run_drains(conn: AsyncConnection[Any], node_ids: Iterable[int]) -> dict[int, datetime]:
    """Unhealthy nodes whose drain a dry run recorded since they became unhealthy -> when the dry run last
    acted on them (that drain, or the site's check since): their quiet window counts from then."""
    ids = list(node_ids)
    if not ids:
        return {}
    cur = await conn.execute(
        "SELECT h.node_id, max(a.at) FROM health_node h"
        " JOIN health_action a ON a.node_id = h.node_id AND a.at >= h.since"
        "   AND (a.action = 'drain' AND a.dry_run OR a.action = 'validate')"
        " WHERE h.node_id = ANY(%s) AND h.state = 'unhealthy'"
        " GROUP BY h.node_id HAVING bool_or(a.action = 'drain')",
        [ids],
    )
    return {node_id: last for node_id, last in await cur.fetchall()}


def severity_of(items: Iterable[Evidence]) -> Severity:
    ranks = {Severity.IGNORE: 0, Severity.SUSPECT: 1, Severity.UNHEALTHY: 2}
    return max((e.severity for e in items), key=lambda s: ranks[s], default=Severity.IGNORE)
