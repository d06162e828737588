"""The health API: nodes by state with their evidence, the audit trail (transitions and scheduler actions),
episodes (each time a node left healthy, its repair and what followed) and repair outcomes per cause,
read with the read token; holds set and lifted with the admin token (an operator's word gpuscope obeys)."""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query
from pydantic import BaseModel, Field

from gpuscope.collector.api.deps import ReadPoolDep, WritePoolDep, require_admin_token, require_read_token
from gpuscope.collector.api.params import TimeRangeDep
from gpuscope.collector.api.responses import error
from gpuscope.health import holds
from gpuscope.health.episode_reads import episode, episodes, repair_outcomes
from gpuscope.health.reads import NodeHealth, health_actions, health_nodes, health_transitions

router = APIRouter(prefix="/api/v1/health", tags=["health"])
StateName = Literal["healthy", "suspect", "unhealthy", "drained", "validating"]


def node_json(node: NodeHealth) -> dict[str, Any]:
    return {
        "cluster": node.cluster,
        "node": node.node,
        "state": node.state,
        "since": node.since,
        "reason": node.reason,
        "held_by": node.held_by,
        # A dry run's drain, recorded and not run ({"at", "detail"}): the node is still in service.
        "would_drain": asdict(node.would_drain) if node.would_drain else None,
        "gpus": [asdict(g) for g in node.gpus],
        "evidence": [
            {"at": e.at, "kind": e.kind, "gpu": e.gpu, "code": e.code, "severity": e.severity, "action": e.action,
             "detail": e.detail}
            for e in node.evidence
        ],
    }  # fmt: skip


@router.get("/nodes", dependencies=[Depends(require_read_token)])
def get_nodes(
    pool: ReadPoolDep,
    cluster: Annotated[str | None, Query(max_length=200)] = None,
    state: StateName | None = None,
    node: Annotated[str | None, Query(max_length=200, description="only nodes of this name, in any cluster")] = None,
) -> list[dict[str, Any]]:
    """Every node with its state, since when and why, its GPUs' states and the evidence of its current
    episode (since it was last healthy), the least healthy first. `would_drain`: the drain a dry run
    recorded for an unhealthy node and did not run."""
    with pool.connection() as conn:
        return [node_json(n) for n in health_nodes(conn, cluster, state, node=node)]


@router.get("/transitions", dependencies=[Depends(require_read_token)])
def get_transitions(pool: ReadPoolDep, span: TimeRangeDep) -> list[dict[str, Any]]:
    """Every state change in the range, newest first; `actor` is gpuscope, human or scheduler."""
    with pool.connection() as conn:
        rows = health_transitions(conn, span)
    return [
        {"at": t.at, "cluster": t.cluster, "node": t.node, "from": t.from_state, "to": t.to_state,
         "reason": t.reason, "actor": t.actor}
        for t in rows
    ]  # fmt: skip


@router.get("/actions", dependencies=[Depends(require_read_token)])
def get_actions(pool: ReadPoolDep, span: TimeRangeDep) -> list[dict[str, Any]]:
    """Every scheduler command gpuscope ran, would have run (dry run) or refused, newest first."""
    with pool.connection() as conn:
        return [asdict(a) for a in health_actions(conn, span)]


@router.get("/episodes", dependencies=[Depends(require_read_token)])
def get_episodes(
    pool: ReadPoolDep,
    span: TimeRangeDep,
    cluster: Annotated[str | None, Query(max_length=200)] = None,
    node: Annotated[str | None, Query(max_length=200, description="only nodes of this name, in any cluster")] = None,
    gpu: Annotated[str | None, Query(max_length=200, description="only episodes naming the GPU of this UUID")] = None,
) -> list[dict[str, Any]]:
    """Each time a node left healthy, overlapping the range, newest first: its cause, how long its GPUs
    were out (`out_s`, `gpu_hours`), the repair chosen and its outcome, the check's verdict, and what
    followed: `failed_again_7d` / `failed_again_30d` (the same node, or GPU for a GPU-scoped episode,
    failing again within 7 / 30 days of `back_at`: taken out, given a repair, or held for inspection;
    null: not known yet) and `next_episode_id`, that failure."""
    with pool.connection() as conn:
        return [asdict(e) for e in episodes(conn, span, cluster, node, gpu)]


@router.get(
    "/episodes/{episode_id}",
    dependencies=[Depends(require_read_token)],
    responses={404: error("No episode has this id")},
)
def get_episode(pool: ReadPoolDep, episode_id: Annotated[int, Path(ge=1, le=2**63 - 1)]) -> dict[str, Any]:
    """One episode, with its node's findings (newest first; `evidence_count` all of them) and scheduler
    actions from its start to its end (or now)."""
    with pool.connection() as conn:
        record = episode(conn, episode_id)
    if record is None:
        raise HTTPException(404, f"no episode {episode_id}")
    return {
        **asdict(record.episode),
        "evidence": [asdict(e) for e in record.evidence],
        "evidence_count": record.evidence_count,
        "actions": [asdict(a) for a in record.actions],
    }


@router.get("/repairs", dependencies=[Depends(require_read_token)])
def get_repairs(
    pool: ReadPoolDep, span: TimeRangeDep, cluster: Annotated[str | None, Query(max_length=200)] = None
) -> list[dict[str, Any]]:
    """Per cause and repair, the failures (episodes taken out, or given a repair in a dry run) that ended
    in the range, and whether the repair held: `held_7d` (no failure again within 7 days, and 7 days
    passed), `failed_7d`, `too_early_7d`, the same for 30 days, and `held_rate_7d` / `held_rate_30d` =
    held / (held + failed), null without a verdict."""
    with pool.connection() as conn:
        rows = repair_outcomes(conn, span, cluster)
    return [{**asdict(r), "held_rate_7d": r.held_rate_7d, "held_rate_30d": r.held_rate_30d} for r in rows]


class HoldIn(BaseModel):
    by: str = Field(min_length=1, max_length=200, description="who holds it")
    reason: str = Field(default="", max_length=1000)


@router.put(
    "/nodes/{cluster}/{node}/hold",
    dependencies=[Depends(require_admin_token)],
    responses={404: error("No node has this name in this cluster")},
)
async def put_hold(pool: WritePoolDep, cluster: str, node: str, body: HoldIn) -> dict[str, Any]:
    """Hold a node: gpuscope keeps judging it but neither drains nor resumes it until the hold is lifted."""
    words = f"{body.by}" + (f": {body.reason}" if body.reason else "")
    async with pool.connection() as conn:
        found = await holds.set_hold(conn, cluster, node, words, datetime.now(UTC))
    if not found:
        raise HTTPException(404, f"no node {node!r} in cluster {cluster!r}")
    return {"cluster": cluster, "node": node, "held_by": words}


@router.delete(
    "/nodes/{cluster}/{node}/hold",
    dependencies=[Depends(require_admin_token)],
    responses={404: error("No node has this name in this cluster")},
)
async def delete_hold(pool: WritePoolDep, cluster: str, node: str) -> dict[str, Any]:
    async with pool.connection() as conn:
        found = await holds.set_hold(conn, cluster, node, None, datetime.now(UTC))
    if not found:
        raise HTTPException(404, f"no node {node!r} in cluster {cluster!r}")
    return {"cluster": cluster, "node": node, "held_by": None}
