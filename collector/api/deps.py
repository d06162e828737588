"""Typed FastAPI dependencies: the pools, the token check and the ingest state live on app.state."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from collector.ingest.state import IngestState


def get_ingest_pool(request: Request) -> AsyncConnectionPool:
    return request.app.state.ingest_pool


def get_read_pool(request: Request) -> ConnectionPool[Any]:
    return request.app.state.read_pool


def get_ingest_state(request: Request) -> IngestState:
    return request.app.state.ingest


IngestPoolDep = Annotated[AsyncConnectionPool, Depends(get_ingest_pool)]
ReadPoolDep = Annotated[ConnectionPool[Any], Depends(get_read_pool)]
IngestStateDep = Annotated[IngestState, Depends(get_ingest_state)]
