"""Typed FastAPI dependencies over the collector's state (api/state.py): pools, token checks, ingest state.

They are `async def` on purpose: FastAPI runs a plain `def` dependency in a thread pool, a thread
hand-off per request on the hot ingest path.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from gpuscope.collector.api.state import collector_state
from gpuscope.collector.ingest.state import IngestState


async def get_read_pool(request: Request) -> ConnectionPool[Any]:
    return collector_state(request.app).read_pool


async def get_ingest_state(request: Request) -> IngestState:
    return collector_state(request.app).ingest


ReadPoolDep = Annotated[ConnectionPool[Any], Depends(get_read_pool)]
IngestStateDep = Annotated[IngestState, Depends(get_ingest_state)]


async def require_read_token(request: Request) -> None:
    """When the collector was given a read token, the read API wants it too."""
    auth = collector_state(request.app).read_auth
    if auth is not None and not auth.verify(request.headers.get("authorization")):
        raise HTTPException(401, "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"})


async def get_write_pool(request: Request) -> AsyncConnectionPool[Any]:
    return collector_state(request.app).ingest_pool


WritePoolDep = Annotated[AsyncConnectionPool[Any], Depends(get_write_pool)]


async def require_admin_token(request: Request) -> str:
    """Changes through the API (silences, and what comes next) want the admin token; none configured: 403."""
    auth = collector_state(request.app).admin_auth
    if auth is None:
        raise HTTPException(403, "silences are read-only here: start the collector with --admin-token-file")
    if not auth.verify(request.headers.get("authorization")):
        raise HTTPException(401, "missing or invalid admin bearer token", headers={"WWW-Authenticate": "Bearer"})
    return "admin"
