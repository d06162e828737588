"""GET /api/v1/nics/series: InfiniBand ports of chosen nodes per time bucket (counters as rates)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel

from gpuscope.collector import query
from gpuscope.collector.api.deps import ReadPoolDep
from gpuscope.collector.api.params import BucketParam, TimeRangeDep, bucket_width, check_points, fill
from gpuscope.collector.api.responses import error
from gpuscope.collector.query.arrays import nan_to_none
from gpuscope.collector.store.columns import PORT_METRICS

router = APIRouter(prefix="/api/v1", tags=["read"])

MAX_PORTS = 4096


class PortOut(BaseModel):
    cluster: str
    rack: str
    node: str
    device: str
    port: int


class NicSeriesOut(BaseModel):
    metric: str
    per_second: bool
    bucket_seconds: int
    times: list[datetime]
    ports: list[PortOut]
    values: list[list[float | None]]


@router.get(
    "/nics/series",
    response_model=NicSeriesOut,
    summary="One InfiniBand metric per port per time bucket; counters (bytes, packets, waits, errors) as rates per s",
    responses={404: error("No InfiniBand port on these nodes (of this cluster)")},
)
def get_nic_series(
    pool: ReadPoolDep,
    time_range: TimeRangeDep,
    node: Annotated[list[str], Query(min_length=1, max_length=1024, description="Node names (repeat for several)")],
    cluster: str | None = None,
    metric: str = "xmit_bytes",
    bucket_seconds: BucketParam = None,
) -> NicSeriesOut:
    if metric not in PORT_METRICS:
        raise HTTPException(422, f"unknown port metric {metric!r}; one of {sorted(PORT_METRICS)}")
    bucket = bucket_width(time_range, bucket_seconds)
    with pool.connection() as conn:
        bucket = fill(conn, time_range, bucket, bucket_seconds)  # ports are sampled with their node's GPUs
        ports = query.select_ports(conn, cluster=cluster, nodes=node)
        if not ports:
            raise HTTPException(404, "no InfiniBand port on these nodes")
        if len(ports) > MAX_PORTS:
            raise HTTPException(422, f"{len(ports)} ports match; at most {MAX_PORTS} per request")
        check_points(time_range, bucket, ports=len(ports))
        result = query.nic_series(conn, metric, time_range, bucket, ports)
    return NicSeriesOut(
        metric=metric,
        per_second=result.per_second,
        bucket_seconds=bucket,
        times=result.times,
        ports=[
            PortOut(cluster=p.cluster, rack=p.rack, node=p.node, device=p.device, port=p.port) for p in result.ports
        ],
        values=nan_to_none(result.values),
    )
