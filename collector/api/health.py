"""GET /healthz (does the database take writes) and GET /metrics (the collector's own figures)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from psycopg import Connection
from psycopg_pool import ConnectionPool

from gpuscope.collector.api.deps import IngestStateDep, ReadPoolDep
from gpuscope.collector.api.responses import HealthOut, UnhealthyOut
from gpuscope.collector.api.state import DatabaseMetrics, collector_state
from gpuscope.collector.store.availability import Cause, DatabaseStatus, classify

router = APIRouter(tags=["health"])
log = logging.getLogger(__name__)


async def _part_metrics(request: Request) -> Mapping[str, DatabaseMetrics]:
    """Each part's figures for /metrics (collector/parts.py), by part name."""
    return collector_state(request.app).database_metrics


PartMetricsDep = Annotated[Mapping[str, DatabaseMetrics], Depends(_part_metrics)]


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
def metrics(state: IngestStateDep, pool: ReadPoolDep, parts: PartMetricsDep) -> Response:
    own = generate_latest(state.scraped) + _availability_metrics(state.database)  # every worker's, summed
    return Response(own + _database_metrics(pool, parts) + _read_lag(pool), media_type=CONTENT_TYPE_LATEST)


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


# Seconds since the read server replayed its last transaction: under steady ingest, how far the read
# API is behind the primary (--read-db on a standby); 0 on the primary. An idle primary makes it grow.
_LAG_SQL = (
    "SELECT pg_is_in_recovery(), CASE WHEN pg_is_in_recovery()"
    " THEN extract(epoch FROM now() - pg_last_xact_replay_timestamp()) ELSE 0 END"
)


def _read_lag(pool: ConnectionPool[Any]) -> bytes:
    """Which server the read API is on and how far behind it is; nothing when it cannot be asked."""
    try:
        with pool.connection(timeout=2.0) as conn:
            row = conn.execute(_LAG_SQL).fetchone()
    except Exception:  # the database is away: /metrics serves the rest
        return b""
    if row is None:
        return b""
    standby = GaugeMetricFamily(
        "gpuscope_collector_read_standby", "1 when the read API reads from a standby (--read-db), else 0"
    )
    standby.add_metric([], 1.0 if row[0] else 0.0)
    families: list[Metric] = [standby]
    if row[1] is not None:  # a standby that has replayed nothing since it started has no figure
        text = "Seconds since the read API's server replayed its last transaction (0 on the primary)"
        families.append(GaugeMetricFamily("gpuscope_collector_read_lag_seconds", text, value=float(row[1])))
    return _exposition(*families)


def _database_metrics(pool: ConnectionPool[Any], parts: Mapping[str, DatabaseMetrics]) -> bytes:
    """The parts' figures from the database (active stragglers, nodes out of health: the JobStraggler and
    Node* rules in deploy/prometheus), so sites alerting with Prometheus see them too. A part whose read
    fails is left out, every part when the database is away: /metrics still serves the rest."""
    if not parts:
        return b""
    try:
        with pool.connection(timeout=2.0) as conn:
            families = [family for name, read in parts.items() for family in _families_of(name, read, conn)]
    except Exception:  # no connection: the database is away
        return b""
    return _exposition(*families)


def _families_of(name: str, read: DatabaseMetrics, conn: Connection[Any]) -> list[Metric]:
    try:
        return list(read(conn))
    except Exception as exc:  # a timeout, a missing table, a bug: that part's figures, not the scrape
        log.warning("/metrics: the %s part's figures are left out: %r", name, exc)
        return []


def _exposition(*families: Metric) -> bytes:
    """Families computed for this scrape, in the text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(families))
    return generate_latest(registry)


class _Fixed(Collector):
    def __init__(self, families: tuple[Metric, ...]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families
