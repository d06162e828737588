"""Typed FastAPI dependencies over the collector's state (api/state.py): pools, token checks, ingest state.

They are `async def` on purpose: FastAPI runs a plain `def` dependency in a thread pool, a thread
hand-off per request on the hot ingest path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from gpuscope.collector.api.guard import Refusal, check_token
from gpuscope.collector.api.state import collector_state
from gpuscope.collector.ingest.state import IngestState


async def get_read_pool(request: Request) -> ConnectionPool[Any]:
    return collector_state(request.app).read_pool


async def get_ingest_state(request: Request) -> IngestState:
    return collector_state(request.app).ingest


ReadPoolDep = Annotated[ConnectionPool[Any], Depends(get_read_pool)]
IngestStateDep = Annotated[IngestState, Depends(get_ingest_state)]


async def require_read_token(request: Request) -> None:
    """When the collector was given a read token, the read API wants it (or the admin token) too.
    api/guard.py checks the same before any route runs; this keeps each route safe on its own."""
    _check(request, lambda: check_token(collector_state(request.app), request.scope))


async def get_write_pool(request: Request) -> AsyncConnectionPool[Any]:
    return collector_state(request.app).ingest_pool


WritePoolDep = Annotated[AsyncConnectionPool[Any], Depends(get_write_pool)]


async def require_admin_token(request: Request) -> str:
    """Changes through the API (silences, and what comes next) want the admin token: 401 without it, 403
    with another valid token, 404 when none is configured (changes are switched off). api/guard.py
    checks this before the body is read; this keeps each route safe on its own."""
    _check(request, lambda: check_token(collector_state(request.app), {**request.scope, "method": "POST"}))
    return "admin"


def _check(request: Request, check: Callable[[], None]) -> None:
    try:
        check()
    except Refusal as refusal:
        headers = {key.decode(): value.decode() for key, value in refusal.headers}
        raise HTTPException(refusal.status, refusal.detail, headers=headers or None) from None
