"""GET /api/v1/heatmap and /api/v1/rack-power: the read API over the query layer."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel

from collector import query
from collector.api.deps import ReadPoolDep
from collector.query.arrays import nan_to_none
from collector.store.columns import GPU_METRIC_KEYS

router = APIRouter(prefix="/api/v1", tags=["read"])

MinutesParam = Annotated[int, Query(ge=1, le=7 * 24 * 60, description="How far back from now")]
BucketParam = Annotated[int | None, Query(ge=1, le=86400, description="Bucket width in seconds (default: auto)")]


class HeatmapOut(BaseModel):
    metric: str
    bucket_seconds: int
    times: list[datetime]
    gpus: list[dict[str, Any]]
    values: list[list[float | None]]


class RackPowerOut(BaseModel):
    bucket_seconds: int
    times: list[datetime]
    racks: list[str]
    watts: list[list[float | None]]


@router.get("/heatmap", response_model=HeatmapOut, summary="One metric per GPU per time bucket")
def get_heatmap(
    pool: ReadPoolDep, minutes: MinutesParam = 60, metric: str = "util_pct", bucket_seconds: BucketParam = None
) -> HeatmapOut:
    if metric not in GPU_METRIC_KEYS:
        raise HTTPException(422, f"unknown metric {metric!r}; one of {sorted(GPU_METRIC_KEYS)}")
    time_range = query.last(minutes * 60)
    bucket = bucket_seconds or query.bucket_for(time_range)
    with pool.connection() as conn:
        result = query.heatmap(conn, metric, time_range, bucket)
    return HeatmapOut(
        metric=metric,
        bucket_seconds=bucket,
        times=result.times,
        gpus=[
            {"cluster": r.cluster, "rack": r.rack, "node": r.node, "gpu": r.gpu_index, "uuid": r.uuid}
            for r in result.rows
        ],
        values=nan_to_none(result.values),
    )


@router.get("/rack-power", response_model=RackPowerOut, summary="Total GPU power per rack per time bucket")
def get_rack_power(pool: ReadPoolDep, minutes: MinutesParam = 60, bucket_seconds: BucketParam = None) -> RackPowerOut:
    time_range = query.last(minutes * 60)
    bucket = bucket_seconds or query.bucket_for(time_range)
    with pool.connection() as conn:
        result = query.rack_power(conn, time_range, bucket)
    return RackPowerOut(bucket_seconds=bucket, times=result.times, racks=result.racks, watts=nan_to_none(result.watts))
