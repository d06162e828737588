"""The health loop's episode records (table health_episode, migration 0021): opened at a node's first
counted finding, given the ladder's repair at its drain, its check's verdict, closed at its return.
Reads for people (history, how often a repair held) are in health/episode_reads.py."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from gpuscope.health.model import Evidence, Severity

_RANK = {Severity.IGNORE: 0, Severity.SUSPECT: 1, Severity.UNHEALTHY: 2}


CODED_KINDS = frozenset({"xid", "recovery_action"})  # kinds whose code tells causes apart (XID 79 is not XID 48)


def cause_of(evidence: Evidence) -> str:
    """The cause an episode is counted under: the rule, with its code where the code names the failure."""
    return (
        f"{evidence.kind}:{evidence.code}"
        if evidence.kind in CODED_KINDS and evidence.code is not None
        else evidence.kind
    )


def worst(items: Iterable[Evidence]) -> Evidence:
    """The finding that speaks for a set: the most severe, the newest of those."""
    return max(items, key=lambda e: (_RANK[e.severity], e.at))


@dataclass(frozen=True)
class OpenEpisode:
    episode_id: int
    node_id: int
    gpu_id: int | None
    gpu_index: int | None
    gpu_uuid: str | None
    cause: str
    action: str  # the worst finding's recommended action (the floor of the ladder's choice)
    rung: int | None
    repair: str | None
    scope: str
    out_at: datetime | None
    repair_result: str | None


async def note_findings(conn: AsyncConnection[Any], node_id: int, items: Sequence[Evidence]) -> None:
    """Open the node's episode at its first counted finding; while no repair is chosen yet, an unhealthy
    finding becomes its cause (a node that went suspect on a thermal finding and then lost a GPU was
    taken out for the lost GPU)."""
    top = worst(items)
    params = {
        "node": node_id,
        "gpu": top.gpu_id,
        "cause": cause_of(top),
        "detail": top.detail,
        "action": top.action,
        "start": min(e.at for e in items),
        "unhealthy": top.severity == Severity.UNHEALTHY,
    }
    await conn.execute(
        "INSERT INTO health_episode (node_id, gpu_id, cause, cause_detail, cause_action, started_at)"
        " VALUES (%(node)s, %(gpu)s, %(cause)s, %(detail)s, %(action)s, %(start)s)"
        " ON CONFLICT (node_id) WHERE back_at IS NULL DO UPDATE"
        " SET gpu_id = excluded.gpu_id, cause = excluded.cause, cause_detail = excluded.cause_detail,"
        "     cause_action = excluded.cause_action"
        " WHERE health_episode.rung IS NULL AND %(unhealthy)s",
        params,
    )


async def open_episodes(conn: AsyncConnection[Any], node_ids: Iterable[int]) -> dict[int, OpenEpisode]:
    ids = list(node_ids)
    if not ids:
        return {}
    cur = await conn.execute(
        "SELECT e.episode_id, e.node_id, e.gpu_id, g.gpu_index, g.uuid, e.cause, e.cause_action, e.rung, e.repair,"
        "       e.scope, e.out_at, e.repair_result"
        " FROM health_episode e LEFT JOIN gpu g USING (gpu_id) WHERE e.back_at IS NULL AND e.node_id = ANY(%s)",
        [ids],
    )
    return {row[1]: OpenEpisode(*row) for row in await cur.fetchall()}


async def failures_before(
    conn: AsyncConnection[Any], node_id: int, cause: str, since: datetime, episode_id: int
) -> int:
    """Earlier episodes of this node and cause, since `since`, that got a repair (were, or would have been
    in a dry run, taken out): the failures the ladder counts."""
    cur = await conn.execute(
        "SELECT count(*) FROM health_episode WHERE node_id = %s AND cause = %s AND started_at >= %s"
        " AND rung IS NOT NULL AND episode_id <> %s",
        [node_id, cause, since, episode_id],
    )
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def chose_repair(
    conn: AsyncConnection[Any], episode_id: int, rung: int, repair: str, reason: str, dry_run: bool
) -> None:
    await conn.execute(
        "UPDATE health_episode SET rung = %s, repair = %s, repair_reason = %s, dry_run = %s WHERE episode_id = %s",
        [rung, repair, reason, dry_run, episode_id],
    )


async def taken_out(conn: AsyncConnection[Any], episode_id: int, at: datetime, scope: str, gpus: int) -> None:
    await conn.execute(
        "UPDATE health_episode SET out_at = coalesce(out_at, %s), scope = %s, gpus_out = %s WHERE episode_id = %s",
        [at, scope, gpus, episode_id],
    )


async def repaired(conn: AsyncConnection[Any], node_id: int, result: str) -> None:
    await conn.execute(
        "UPDATE health_episode SET repair_result = %s WHERE node_id = %s AND back_at IS NULL", [result, node_id]
    )


async def validated(conn: AsyncConnection[Any], node_id: int, verdict: str, failed_test: str | None) -> None:
    """The newest check's verdict; the failing test of a check that failed stays named after a later pass
    (every check's output is also in the node's validate actions)."""
    await conn.execute(
        "UPDATE health_episode SET validation = %s, failed_test = coalesce(%s, failed_test)"
        " WHERE node_id = %s AND back_at IS NULL",
        [verdict, failed_test, node_id],
    )


async def held_for_inspection(conn: AsyncConnection[Any], node_id: int, at: datetime) -> None:
    """Held for inspection: `held_at` stays when an operator returns the node after it (outcome `returned`)."""
    await conn.execute(
        "UPDATE health_episode SET outcome = 'held', held_at = %s WHERE node_id = %s AND back_at IS NULL",
        [at, node_id],
    )


async def close(conn: AsyncConnection[Any], node_id: int, at: datetime, by_operator: bool) -> None:
    """The node is healthy again: returned (it had been out), cleared (never out) or resumed by an operator."""
    await conn.execute(
        "UPDATE health_episode SET back_at = %(at)s,"
        " outcome = CASE WHEN %(human)s THEN 'resumed_by_operator' WHEN out_at IS NOT NULL THEN 'returned'"
        "                ELSE 'cleared' END"
        " WHERE node_id = %(node)s AND back_at IS NULL",
        {"at": at, "human": by_operator, "node": node_id},
    )


async def gpu_count(conn: AsyncConnection[Any], node_id: int) -> int:
    cur = await conn.execute("SELECT count(*) FROM gpu WHERE node_id = %s", [node_id])
    row = await cur.fetchone()
    return int(row[0]) if row else 0
