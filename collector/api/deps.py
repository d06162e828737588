"""Typed FastAPI dependencies: the pools, the token check and the ingest state live on app.state.

They are `async def` on purpose: FastAPI runs a plain `def` dependency in a thread pool, a thread
hand-off per request on the hot ingest path.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from psycopg_pool import ConnectionPool

from collector.ingest.state import IngestState


async def get_read_pool(request: Request) -> ConnectionPool[Any]:
    return request.app.state.read_pool


async def get_ingest_state(request: Request) -> IngestState:
    return request.app.state.ingest


ReadPoolDep = Annotated[ConnectionPool[Any], Depends(get_read_pool)]
IngestStateDep = Annotated[IngestState, Depends(get_ingest_state)]


async def require_read_token(request: Request) -> None:
    """When the collector was given a read token, the read API wants it too."""
    auth = request.app.state.read_auth
    if auth is not None and not auth.verify(request.headers.get("authorization")):
        raise HTTPException(401, "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"})
