"""The straggler watch's read API: GET /api/v1/stragglers, and the judging model a job's detail carries
(GET /api/v1/jobs/{job_id}'s `straggler_model`), both with the read token like the rest of /api/v1."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from psycopg import Connection
from pydantic import BaseModel

from gpuscope.collector.api.deps import ReadPoolDep, require_read_token
from gpuscope.collector.api.params import TimeRangeDep
from gpuscope.collector.api.read_jobs import JobDetailField
from gpuscope.stragglers.reads import judging_model, stragglers

router = APIRouter(prefix="/api/v1", tags=["read"], dependencies=[Depends(require_read_token)])


class StragglerOut(BaseModel):
    job_id: str
    cluster: str
    rack: str | None  # null, with node null: a finding about the whole job (cause fabric), no rank blamed
    node: str | None
    gpu: int | None  # null: the node or its NIC
    uuid: str | None
    nic: str | None  # a slow NIC: its device (e.g. mlx5_3) and port, on nodes with several; else null
    port: int | None
    # thermal | power_cap | gpu_degraded (slower at normal clocks) | slow_nic | slow_host | fabric (the
    # job slowed by the fabric or by another job, aggressor_job, on shared nodes); unknown in rows of old
    cause: str
    slowdown: float  # estimated job slowdown, e.g. 0.2 = steps 20% longer
    evidence: dict[str, float]
    started_at: datetime
    declared_at: datetime
    ended_at: datetime | None
    gpus: int  # the GPUs the job held during the episode
    user: str | None  # the job's owner, where the scheduler said
    # GPU-hours the job spent beyond its normal pace: gpus x duration x slowdown / (1 + slowdown), so far
    gpu_hours_lost: float
    aggressor_job: str | None  # fabric: the job whose traffic on shared nodes slowed this one, where known


@router.get(
    "/stragglers", response_model=list[StragglerOut], summary="Stragglers in running and past jobs, newest first"
)
def get_stragglers(
    pool: ReadPoolDep,
    time_range: TimeRangeDep,
    job: str | None = None,
    active: bool = False,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> list[StragglerOut]:
    with pool.connection() as conn:
        rows = stragglers(conn, time_range, job=job, active_only=active, limit=limit)
    return [StragglerOut.model_validate(row, from_attributes=True) for row in rows]


class JudgingModelOut(BaseModel):
    """How the straggler watch judges the job: synchronous (a slow GPU is a straggler), independent
    (replicas that wait for nobody: not judged) or undecided (still learning); wander is its measure."""

    model: str
    wander: float | None
    updated_at: datetime
    words: str


def judging_model_out(conn: Connection[Any], job_id: str) -> JudgingModelOut | None:
    """None: the straggler watch never saw the job run."""
    judged = judging_model(conn, job_id)
    return None if judged is None else JudgingModelOut(**vars(judged), words=judged.words)


STRAGGLER_MODEL = JobDetailField("straggler_model", JudgingModelOut, judging_model_out)
