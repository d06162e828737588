"""GET /api/v1/jobs, /jobs/{job_id}, /stragglers and /events: who ran what on which GPUs, how well,
what slowed it and what broke."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel

from gpuscope.collector import query
from gpuscope.collector.api.deps import ReadPoolDep
from gpuscope.collector.api.params import TimeRangeDep
from gpuscope.collector.api.read import GpuOut, gpu_out
from gpuscope.collector.api.responses import error

router = APIRouter(prefix="/api/v1", tags=["read"])


class UsageOut(BaseModel):
    """Means over the samples of the allocation(s); null where the GPUs did not report the metric."""

    mean_util_pct: float | None
    mean_sm_active_pct: float | None
    mean_tensor_active_pct: float | None
    mean_power_w: float | None


class JobOut(BaseModel):
    job_id: str
    user: str | None
    state: str  # running | finished
    started_at: datetime
    ended_at: datetime | None
    last_seen: datetime
    nodes: list[str]
    gpus: int  # GPUs it held, whole or in part (a MIG device counts its parent GPU)
    gpu_hours: float  # a MIG device counts for its share of the GPU's slices (1g of 7: 1/7 per hour)
    usage: UsageOut
    # Kubernetes: the namespace, the workload that makes the pods one job ("JobSet/train-7"), the pods; null
    # for batch-scheduler jobs
    namespace: str | None = None
    workload: str | None = None
    pods: list[str] | None = None
    mig_devices: int = 0  # MIG devices it held (0: whole GPUs only)
    # Slurm: the job's account and partition, from the prolog's file (deploy/slurm); null elsewhere
    account: str | None = None
    partition: str | None = None


class MigOut(BaseModel):
    """A MIG device of the GPU: a compute instance in a GPU instance."""

    uuid: str  # "MIG-...", as CUDA_VISIBLE_DEVICES and the device plugins name it
    gpu_instance_id: int
    compute_instance_id: int
    profile: str  # the GPU instance profile, "3g.40gb"
    slices: int  # compute slices it has, of the GPU's gpu_slices
    gpu_slices: int


class JobGpuOut(BaseModel):
    gpu: GpuOut
    started_at: datetime
    ended_at: datetime | None
    usage: UsageOut  # a MIG device: its GPU instance's SM and tensor activity (no utilisation or power of its own)
    pod: str | None = None  # Kubernetes: the pod and container that held the GPU
    container: str | None = None
    mig: MigOut | None = None  # the MIG device held; null: the whole GPU


class JudgingModelOut(BaseModel):
    """How the straggler watch judges the job: synchronous (a slow GPU is a straggler), independent
    (replicas that wait for nobody: not judged) or undecided (still learning); wander is its measure."""

    model: str
    wander: float | None
    updated_at: datetime
    words: str


class JobDetailOut(BaseModel):
    job: JobOut
    gpus: list[JobGpuOut]
    straggler_model: JudgingModelOut | None = None  # null: the straggler watch never saw the job run


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


class EventOut(BaseModel):
    ts: datetime
    cluster: str
    rack: str
    node: str
    gpu: int | None
    uuid: str | None
    kind: str
    code: int | None
    count: int
    message: str | None


def _job_out(job: query.JobRow) -> JobOut:
    return JobOut(
        job_id=job.job_id,
        user=job.user,
        state="running" if job.running else "finished",
        started_at=job.started_at,
        ended_at=job.ended_at,
        last_seen=job.last_seen,
        nodes=job.nodes,
        gpus=job.gpus,
        gpu_hours=job.gpu_hours,
        usage=UsageOut(**vars(job.usage)),
        namespace=job.namespace,
        workload=job.workload,
        pods=job.pods,
        mig_devices=job.mig_devices,
        account=job.account,
        partition=job.partition,
    )


@router.get("/jobs", response_model=list[JobOut], summary="Jobs that held GPUs in the range, with their efficiency")
def get_jobs(
    pool: ReadPoolDep,
    time_range: TimeRangeDep,
    state: query.JobState = "all",
    user: str | None = None,
    namespace: Annotated[str | None, Query(description="Kubernetes: only jobs in this namespace")] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 500,
) -> list[JobOut]:
    with pool.connection() as conn:
        found = query.jobs(conn, time_range, state=state, user=user, limit=limit, namespace=namespace)
    return [_job_out(job) for job in found]


@router.get(
    "/jobs/{job_id:path}",  # Kubernetes job ids are "<namespace>/<workload>"
    response_model=JobDetailOut,
    summary="One job: each GPU it held and how it used it",
    responses={404: error("No job has this id")},
)
def get_job(pool: ReadPoolDep, job_id: str) -> JobDetailOut:
    with pool.connection() as conn:
        job = query.job(conn, job_id)
        gpus = query.job_gpus(conn, job_id)
        judged = query.judging_model(conn, job_id)
    if job is None:
        raise HTTPException(404, f"no job {job_id!r}")
    return JobDetailOut(
        job=_job_out(job),
        gpus=[
            JobGpuOut(
                gpu=gpu_out(g.gpu),
                started_at=g.started_at,
                ended_at=g.ended_at,
                usage=UsageOut(**vars(g.usage)),
                pod=g.pod,
                container=g.container,
                mig=MigOut(**vars(g.mig)) if g.mig is not None else None,
            )
            for g in gpus
        ],
        straggler_model=None if judged is None else JudgingModelOut(**vars(judged), words=judged.words),
    )


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
        rows = query.stragglers(conn, time_range, job=job, active_only=active, limit=limit)
    return [StragglerOut.model_validate(row, from_attributes=True) for row in rows]


@router.get("/events", response_model=list[EventOut], summary="XID errors, GPUs lost and back, newest first")
def get_events(
    pool: ReadPoolDep,
    time_range: TimeRangeDep,
    kind: Annotated[list[str], Query(max_length=32, description="Only these kinds (repeat for several)")] = [],  # noqa: B006
    cluster: str | None = None,
    node: str | None = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> list[EventOut]:
    with pool.connection() as conn:
        rows = query.events(conn, time_range, kinds=kind, cluster=cluster, node=node, limit=limit)
    return [EventOut.model_validate(row, from_attributes=True) for row in rows]
