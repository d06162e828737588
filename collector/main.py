"""Builds the collector's FastAPI app; the pools are opened and closed in its lifespan."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from fastapi import Depends, FastAPI
from psycopg_pool import AsyncConnectionPool
from starlette.concurrency import run_in_threadpool

from collector.api import health, ingest, read
from collector.api.deps import require_read_token
from collector.auth import TokenAuth
from collector.ingest.state import IngestState
from collector.store import allocations
from collector.store.migrate import migrate
from collector.store.pools import open_read_pool

log = logging.getLogger(__name__)


def create_app(
    dsn: str,
    auth: TokenAuth,
    max_body_bytes: int = 32 * 2**20,
    max_concurrent_writes: int = 8,
    read_auth: TokenAuth | None = None,
) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await run_in_threadpool(migrate, dsn)
        ingest_pool = AsyncConnectionPool(dsn, min_size=1, max_size=max_concurrent_writes, open=False)
        await ingest_pool.open(wait=True, timeout=30)  # fail start-up fast if the database is away
        read_pool = await run_in_threadpool(open_read_pool, dsn)
        app.state.ingest_pool = ingest_pool
        app.state.read_pool = read_pool
        app.state.read_auth = read_auth
        app.state.ingest = IngestState(
            auth=auth, max_body_bytes=max_body_bytes, write_slots=asyncio.Semaphore(max_concurrent_writes)
        )
        expiry = asyncio.create_task(_expire_allocations(ingest_pool), name="allocation-expiry")
        try:
            yield
        finally:
            expiry.cancel()
            await ingest_pool.close()
            read_pool.close()

    app = FastAPI(
        title="gpuscope collector",
        version="0.1.0",
        description="Ingest for gpuscope exporters and the read API over the GPU telemetry store.",
        lifespan=lifespan,
    )
    app.include_router(ingest.router)
    app.include_router(read.router, dependencies=[Depends(require_read_token)])
    app.include_router(health.router)
    return app


async def _expire_allocations(pool: AsyncConnectionPool, every_s: float = 60.0) -> None:
    """Close allocations whose exporter stopped reporting (every collector may run this: it is idempotent)."""
    while True:
        try:
            async with pool.connection() as conn:
                closed = await allocations.expire_stale(conn)
            if closed:
                log.info("closed %d stale job allocations", closed)
        except psycopg.Error as exc:
            log.warning("expiring stale allocations failed: %s", exc)
        await asyncio.sleep(every_s)
