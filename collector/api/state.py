"""What the collector keeps while it runs, in one typed object on app.state (set in main.py's lifespan)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from prometheus_client.core import Metric
from psycopg import Connection
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from gpuscope.collector.api.auth import TokenAuth
from gpuscope.collector.ingest.state import IngestState

# Metric families a part computes from the database at each scrape of /metrics (collector/parts.py).
DatabaseMetrics = Callable[[Connection[Any]], Iterable[Metric]]


@dataclass(frozen=True)
class CollectorState:
    ingest_pool: AsyncConnectionPool[Any]  # writes (async, on the event loop)
    read_pool: ConnectionPool[Any]  # reads (sync, in FastAPI's thread pool)
    ingest: IngestState
    read_auth: TokenAuth | None  # None: the read API is open
    admin_auth: TokenAuth | None  # None: nothing may be changed through the API
    read_timeout_s: float | None = None  # each read statement's limit, and one read request's budget
    database_metrics: Mapping[str, DatabaseMetrics] = field(default_factory=dict)  # by part name


def collector_state(app: FastAPI) -> CollectorState:
    state = getattr(app.state, "collector", None)
    if state is None:
        raise RuntimeError("the collector is not started (its lifespan has not run)")
    return state
