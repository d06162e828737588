"""GET /api/v1/heatmap, /series, /rack-power and /fleet: GPU telemetry through the query layer."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, Response
from pydantic import BaseModel, Field

from gpuscope.collector import query
from gpuscope.collector.api.deps import ReadPoolDep
from gpuscope.collector.api.params import BucketParam, TimeRangeDep, bucket_width, check_points, fill
from gpuscope.collector.api.responses import error
from gpuscope.collector.api.state import collector_state
from gpuscope.collector.query.arrays import nan_to_none
from gpuscope.collector.store.columns import GPU_METRIC_KEYS

router = APIRouter(prefix="/api/v1", tags=["read"])

MAX_SERIES_GPUS = 4096


class GpuOut(BaseModel):
    cluster: str
    rack: str
    node: str
    gpu: int
    uuid: str


class HeatmapOut(BaseModel):
    metric: str
    bucket_seconds: int
    times: list[datetime]
    gpus: list[GpuOut]
    values: list[list[float | None]]


class SeriesOut(BaseModel):
    bucket_seconds: int
    times: list[datetime]
    gpus: list[GpuOut]
    values: dict[str, list[list[float | None]]]  # metric -> one list per GPU, one value per time


class RackPowerOut(BaseModel):
    bucket_seconds: int
    times: list[datetime]
    racks: list[str]
    watts: list[list[float | None]]


class FleetOut(BaseModel):
    gpus_known: int
    gpus_reporting: int
    gpus_up: int
    mean_util_pct: float | None
    total_power_w: float | None
    running_jobs: int
    nodes_known: int
    gpus_unhealthy: int = Field(description="silent, down, a row remap pending or failed, or a critical XID in 10 min")
    gpus_working: int = Field(description="in a job and active (SM activity, else utilisation, at least 5%)")
    gpus_idle_in_job: int = Field(description="in a job and below 5% activity")
    gpus_free: int = Field(description="in no job (and healthy)")
    mean_sm_active_pct: float | None = Field(description="mean SM activity of the working GPUs")
    mean_tensor_active_pct: float | None = Field(description="mean tensor-core activity of the working GPUs")


def gpu_out(row: query.GpuRow) -> GpuOut:
    return GpuOut(cluster=row.cluster, rack=row.rack, node=row.node, gpu=row.gpu_index, uuid=row.uuid)


def _json(model: BaseModel) -> Response:
    """The model as its JSON, written by pydantic in one pass. Returned as a model, FastAPI validates it
    again against response_model, turns it into Python objects and has json.dumps write those: for a
    day of minutes (a node or GPU page) that cost more than the query. The schema is still the model's."""
    return Response(model.model_dump_json(), media_type="application/json")


def _check_metric(metric: str) -> None:
    if metric not in GPU_METRIC_KEYS:
        raise HTTPException(422, f"unknown metric {metric!r}; one of {sorted(GPU_METRIC_KEYS)}")


@router.get("/heatmap", response_model=HeatmapOut, summary="One metric for every GPU per time bucket")
def get_heatmap(
    pool: ReadPoolDep, time_range: TimeRangeDep, metric: str = "util_pct", bucket_seconds: BucketParam = None
) -> HeatmapOut:
    _check_metric(metric)
    bucket = bucket_width(time_range, bucket_seconds)
    with pool.connection() as conn:
        bucket = fill(conn, time_range, bucket, bucket_seconds)
        check_points(time_range, bucket, GPUs=query.inventory_counts(conn)[0])  # those reporting are fewer
        result = query.heatmap(conn, metric, time_range, bucket)
    return HeatmapOut(
        metric=metric,
        bucket_seconds=bucket,
        times=result.times,
        gpus=[gpu_out(r) for r in result.rows],
        values=nan_to_none(result.values),
    )


@router.get(
    "/series",
    response_model=SeriesOut,
    summary="Metrics of chosen GPUs per time bucket: a node's (cluster, node), one GPU (uuid) or a job's (job)",
    responses={404: error("No GPU matches cluster, node, uuid and job")},
)
def get_series(
    request: Request,
    pool: ReadPoolDep,
    time_range: TimeRangeDep,
    metric: Annotated[list[str], Query(min_length=1, max_length=16)],
    cluster: str | None = None,
    node: str | None = None,
    uuid: str | None = None,
    job: str | None = None,
    bucket_seconds: BucketParam = None,
) -> Response:
    for name in metric:
        _check_metric(name)
    if node is None and uuid is None and job is None:
        raise HTTPException(422, "choose GPUs with node, uuid or job (the whole fleet is /heatmap)")
    bucket = bucket_width(time_range, bucket_seconds)
    with pool.connection() as conn:
        bucket = fill(conn, time_range, bucket, bucket_seconds)
        gpu_ids = query.select_gpus(conn, cluster=cluster, node=node, uuid=uuid, job=job)
        if not gpu_ids:
            raise HTTPException(404, "no GPU matches")
        if len(gpu_ids) > MAX_SERIES_GPUS:
            raise HTTPException(422, f"{len(gpu_ids)} GPUs match; at most {MAX_SERIES_GPUS} per request")
        check_points(time_range, bucket, metrics=len(metric), GPUs=len(gpu_ids))
        # One statement per metric: they share the statement timeout, so the request is bounded too.
        budget = collector_state(request.app).read_timeout_s
        result = query.series(conn, metric, time_range, bucket, gpu_ids, budget_s=budget)
    return _json(
        SeriesOut(
            bucket_seconds=bucket,
            times=result.times,
            gpus=[gpu_out(r) for r in result.rows],
            values={name: nan_to_none(values) for name, values in result.values.items()},
        )
    )


@router.get("/rack-power", response_model=RackPowerOut, summary="Total GPU power per rack per time bucket")
def get_rack_power(pool: ReadPoolDep, time_range: TimeRangeDep, bucket_seconds: BucketParam = None) -> Response:
    bucket = bucket_width(time_range, bucket_seconds)
    with pool.connection() as conn:
        bucket = fill(conn, time_range, bucket, bucket_seconds)
        check_points(time_range, bucket, racks=query.rack_count(conn))
        result = query.rack_power(conn, time_range, bucket)
    return _json(
        RackPowerOut(bucket_seconds=bucket, times=result.times, racks=result.racks, watts=nan_to_none(result.watts))
    )


@router.get(
    "/fleet",
    response_model=FleetOut,
    summary="GPUs known, reporting and up; what they are doing (working, idle in a job, free, unhealthy); power",
)
def get_fleet(pool: ReadPoolDep) -> FleetOut:
    with pool.connection() as conn:
        summary = query.fleet_summary(conn)
    return FleetOut(**vars(summary))


class TopGpuOut(BaseModel):
    gpu: GpuOut
    ts: datetime = Field(description="the GPU's newest sample")
    value: float


@router.get(
    "/top",
    response_model=list[TopGpuOut],
    summary="GPUs ranked by a metric's newest value (sampled within the 2 minutes before `at`): the hottest now",
)
def get_top(
    pool: ReadPoolDep,
    metric: str = "temp_c",
    limit: Annotated[int, Query(ge=1, le=1000)] = 10,
    order: query.top.Order = "desc",
    at: Annotated[datetime | None, Query(description="rank as of this time (default now), with a UTC offset")] = None,
) -> list[TopGpuOut]:
    _check_metric(metric)
    if at is not None and at.tzinfo is None:
        raise HTTPException(422, "at needs a UTC offset, e.g. 2026-11-20T12:00:00Z")
    with pool.connection() as conn:
        found = query.top_gpus(conn, metric, limit, order, at)
    return [TopGpuOut(gpu=gpu_out(row.gpu), ts=row.ts, value=row.value) for row in found]
