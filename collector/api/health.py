"""GET /healthz (is the database reachable) and GET /metrics (the collector's own figures)."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from collector.api.deps import IngestStateDep, ReadPoolDep

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="200 when the collector can reach its database")
def healthz(pool: ReadPoolDep) -> JSONResponse:
    try:
        with pool.connection(timeout=2.0) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # any failure here means "not healthy", with the reason
        return JSONResponse({"status": "unhealthy", "reason": type(exc).__name__}, status_code=503)
    return JSONResponse({"status": "ok"})


@router.get("/metrics", summary="Collector metrics in the Prometheus text format")
def metrics(state: IngestStateDep) -> Response:
    return Response(generate_latest(state.registry), media_type=CONTENT_TYPE_LATEST)
