"""GET /healthz (does the database take writes) and GET /metrics (the collector's own figures)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from psycopg_pool import ConnectionPool

from gpuscope.collector import query
from gpuscope.collector.api.deps import IngestStateDep, ReadPoolDep
from gpuscope.collector.api.responses import HealthOut, UnhealthyOut
from gpuscope.collector.store.availability import Cause, DatabaseStatus, classify

router = APIRouter(tags=["health"])


@router.get(
    "/healthz",
    summary="200 when the collector can reach its database",
    responses={
        200: {"model": HealthOut, "description": "The database answers"},
        503: {
            "model": UnhealthyOut,
            "description": "The database does not take writes or does not answer; `reason` names the cause",
        },
    },
)
def healthz(pool: ReadPoolDep, state: IngestStateDep) -> JSONResponse:
    """Unhealthy while the database does not take writes (the watch and the last write say why), or
    when a read fails now."""
    availability = state.database.current()
    if not availability.ok:
        since = datetime.fromtimestamp(availability.since, UTC).isoformat()
        body = {"status": "unhealthy", "reason": availability.reason, "cause": availability.cause.value}
        return JSONResponse({**body, "since": since}, status_code=503)
    try:
        with pool.connection(timeout=2.0) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # any failure here means "not healthy", with the reason
        cause = classify(exc)
        reason = type(exc).__name__ if cause is Cause.OK else f"{cause.value}: {type(exc).__name__}"
        return JSONResponse(
            {"status": "unhealthy", "reason": reason, "cause": "database error" if cause is Cause.OK else cause.value},
            status_code=503,
        )
    return JSONResponse({"status": "ok"})


@router.get(
    "/metrics",
    summary="Collector metrics in the Prometheus text format",
    response_class=PlainTextResponse,  # the handler answers itself; this declares text/plain
    responses={200: {"description": "The Prometheus text exposition format"}},
)
def metrics(state: IngestStateDep, pool: ReadPoolDep) -> Response:
    own = generate_latest(state.registry) + _availability_metrics(state.database)
    return Response(own + _database_metrics(pool), media_type=CONTENT_TYPE_LATEST)


def _availability_metrics(database: DatabaseStatus) -> bytes:
    """The database's state as this collector sees it, one series per cause (1 for the current one), so
    a PromQL rule can alert on a full disk even when nothing can be written (deploy/prometheus)."""
    state = GaugeMetricFamily(
        "gpuscope_collector_database_state",
        "1 for the database's state as this collector sees it (ok, unreachable, restarting, disk_full), else 0",
        labels=["state"],
    )
    availability = database.current()
    for cause in Cause:
        state.add_metric([cause.name.lower()], 1.0 if availability.cause is cause else 0.0)
    families = [state]
    if (free := database.free_bytes()) is not None:
        text = "Free bytes in the file system of the embedded database's data directory"
        families.append(GaugeMetricFamily("gpuscope_collector_database_free_bytes", text, value=free))
    return _exposition(*families)


def _database_metrics(pool: ConnectionPool[Any]) -> bytes:
    """Active stragglers and nodes out of health as gauges, so sites alerting with Prometheus see them too
    (the JobStraggler and Node* rules in deploy/prometheus). Left out, not failed, when the database is
    away: /metrics still serves the collector's own figures."""
    stragglers = GaugeMetricFamily(
        "gpuscope_straggler_slowdown_ratio",
        "Estimated slowdown of a running job caused by this node or GPU (active stragglers only)",
        labels=["job_id", "cluster", "node", "gpu", "cause"],
    )
    health = GaugeMetricFamily(
        "gpuscope_node_health_jobs_running",
        "Jobs running on a node that is not healthy (one series per such node: its health state and why)",
        labels=["cluster", "node", "state", "reason"],
    )
    try:
        with pool.connection(timeout=2.0) as conn:
            now = datetime.now(UTC)
            rows = query.stragglers(conn, query.TimeRange(now - timedelta(days=30), now), active_only=True)
            troubled = query.out_of_health(conn)
    except Exception:  # any database trouble: serve the rest
        return b""
    for row in rows:
        gpu = "" if row.gpu is None else str(row.gpu)
        stragglers.add_metric([row.job_id, row.cluster, row.node or "", gpu, row.cause], row.slowdown)
    for node in troubled:
        health.add_metric([node.cluster, node.node, node.state, node.reason], node.jobs)
    return _exposition(stragglers, health)


def _exposition(*families: GaugeMetricFamily) -> bytes:
    """Families computed for this scrape, in the text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(families))
    return generate_latest(registry)


class _Fixed(Collector):
    def __init__(self, families: tuple[GaugeMetricFamily, ...]) -> None:
        self._families = families

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from self._families
