"""Builds the collector's FastAPI app; the pools are opened and closed in its lifespan."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from psycopg_pool import AsyncConnectionPool
from starlette.concurrency import run_in_threadpool

from collector.api import health, ingest, read
from collector.auth import TokenAuth
from collector.ingest.state import IngestState
from collector.store.migrate import migrate
from collector.store.pools import open_read_pool


def create_app(dsn: str, auth: TokenAuth, max_body_bytes: int = 32 * 2**20, max_concurrent_writes: int = 8) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await run_in_threadpool(migrate, dsn)
        ingest_pool = AsyncConnectionPool(dsn, min_size=1, max_size=max_concurrent_writes, open=False)
        await ingest_pool.open(wait=True, timeout=30)  # fail start-up fast if the database is away
        read_pool = await run_in_threadpool(open_read_pool, dsn)
        app.state.ingest_pool = ingest_pool
        app.state.read_pool = read_pool
        app.state.ingest = IngestState(
            auth=auth, max_body_bytes=max_body_bytes, write_slots=asyncio.Semaphore(max_concurrent_writes)
        )
        try:
            yield
        finally:
            await ingest_pool.close()
            read_pool.close()

    app = FastAPI(
        title="gpuscope collector",
        version="0.1.0",
        description="Ingest for gpuscope exporters and the read API over the GPU telemetry store.",
        lifespan=lifespan,
    )
    app.include_router(ingest.router)
    app.include_router(read.router)
    app.include_router(health.router)
    return app
