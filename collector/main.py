"""Builds the collector app (FastAPI behind the ingest fast path); the pools open and close in its lifespan."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from fastapi import Depends, FastAPI
from psycopg_pool import AsyncConnectionPool
from starlette.concurrency import run_in_threadpool

from alerts import views as alert_views
from alerts.engine import AlertEngine
from collector.api import alerts, health, ingest, read, read_jobs, read_nics
from collector.api.deps import require_read_token
from collector.api.fast_ingest import FastIngest
from collector.auth import TokenAuth
from collector.ingest.state import IngestState
from collector.leader import lead_when_free
from collector.store import allocations, rollups, timescale
from collector.store.group_writer import MAX_GROUP, GroupWriter
from collector.store.migrate import migrate
from collector.store.pools import open_read_pool
from collector.store.retention import DEFAULT_RETENTION, Retention
from collector.store.retention import apply as retention_pass
from collector.store.writer import InventoryCache
from collector.stragglers.watch import LOCK_KEY as STRAGGLER_LOCK_KEY
from collector.stragglers.watch import StragglerWatch

log = logging.getLogger(__name__)


def create_app(
    dsn: str,
    auth: TokenAuth,
    max_body_bytes: int = 32 * 2**20,
    max_concurrent_writes: int = 8,
    read_auth: TokenAuth | None = None,
    retention: Retention = DEFAULT_RETENTION,
    timescaledb: timescale.Mode = "auto",
    stragglers: bool = True,
    alert_engine: AlertEngine | None = None,
    admin_auth: TokenAuth | None = None,
) -> FastIngest:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await run_in_threadpool(migrate, dsn)
        layout = await run_in_threadpool(timescale.setup, dsn, timescaledb)
        log.info("storage layout: %s", layout)
        await run_in_threadpool(alert_views.apply, dsn)  # after the layout: the views read its tables
        ingest_pool = AsyncConnectionPool(dsn, min_size=1, max_size=max_concurrent_writes, open=False)
        await ingest_pool.open(wait=True, timeout=30)  # fail start-up fast if the database is away
        async with ingest_pool.connection() as conn:
            await retention_pass(conn, retention, layout=layout)  # today's partitions exist before the first batch
        read_pool = await run_in_threadpool(open_read_pool, dsn)
        app.state.ingest_pool = ingest_pool
        app.state.read_pool = read_pool
        app.state.read_auth = read_auth
        app.state.admin_auth = admin_auth
        cache = InventoryCache(layout)
        app.state.ingest = IngestState(
            auth=auth,
            max_body_bytes=max_body_bytes,
            # Batches waiting for the group writer; beyond this the collector answers 503 (back-pressure).
            write_slots=asyncio.Semaphore(max_concurrent_writes * MAX_GROUP),
            writer=GroupWriter(ingest_pool, cache, writers=max(1, max_concurrent_writes // 2)),
            retention_s=retention.raw.total_seconds(),
            cache=cache,
        )
        tasks = [asyncio.create_task(_maintenance(ingest_pool, retention, layout), name="maintenance")]
        if stragglers:
            tasks.append(asyncio.create_task(_watch_stragglers(dsn), name="stragglers"))
        if alert_engine is not None:
            tasks.append(asyncio.create_task(alert_engine.run(dsn), name="alerts"))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)  # let them close their connections
            await app.state.ingest.writer.close()
            await ingest_pool.close()
            read_pool.close()

    app = FastAPI(
        title="gpuscope collector",
        version="0.1.0",
        description="Ingest for gpuscope exporters and the read API over the GPU telemetry store.",
        lifespan=lifespan,
    )
    app.include_router(ingest.router)
    for router in (read.router, read_nics.router, read_jobs.router):
        app.include_router(router, dependencies=[Depends(require_read_token)])
    app.include_router(alerts.router)  # its routes check the read or the admin token themselves
    app.include_router(health.router)
    return FastIngest(app)  # the ingest route's fast path in front of everything FastAPI serves


async def _maintenance(
    pool: AsyncConnectionPool, retention: Retention, layout: timescale.Layout, every_s: float = 60.0
) -> None:
    """Close allocations whose exporter went quiet and roll up settled minutes (every minute); partitions
    ahead and retention (hourly).
    Every collector replica may run this: each step is idempotent."""
    last_partitions = time.monotonic()
    while True:
        await asyncio.sleep(every_s)
        try:
            async with pool.connection() as conn:
                closed = await allocations.expire_stale(conn)
                if closed:
                    log.info("closed %d stale job allocations", closed)
            if layout == "plain":  # TimescaleDB refreshes its continuous aggregates itself
                async with pool.connection() as conn:
                    await rollups.roll_up(conn)
            if time.monotonic() - last_partitions >= 3600:
                async with pool.connection() as conn:
                    await retention_pass(conn, retention, layout=layout)
                last_partitions = time.monotonic()
        except psycopg.Error as exc:
            log.warning("maintenance failed (will retry): %s", exc)


async def _watch_stragglers(dsn: str, every_s: float = 15.0) -> None:
    """The straggler watch, in one collector at a time (collector/leader.py)."""
    watcher = StragglerWatch()

    async def watch(conn: psycopg.AsyncConnection[Any]) -> None:
        while True:
            await watcher.cycle(conn)
            await asyncio.sleep(every_s)

    # Followers retry well within one watch interval, so a new leader is found before the next cycle.
    await lead_when_free(dsn, STRAGGLER_LOCK_KEY, watch, "straggler watch", retry_s=min(every_s / 3, 5.0))
