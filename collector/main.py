"""Builds the collector app (FastAPI behind the ingest fast path) from its configuration and the parts
the composition root hands it; pools and background work start and stop in the app's lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import psycopg
from fastapi import APIRouter, Depends, FastAPI
from fastapi.routing import APIRoute
from psycopg_pool import AsyncConnectionPool
from starlette.concurrency import run_in_threadpool

from gpuscope.collector.api import docs, errors, health, ingest, read, read_jobs, read_nics
from gpuscope.collector.api.auth import TokenAuth
from gpuscope.collector.api.deps import require_read_token
from gpuscope.collector.api.fast_ingest import FastIngest
from gpuscope.collector.api.guard import MAX_BODY_BYTES, READ_METHODS, RequestGuard
from gpuscope.collector.api.state import CollectorState
from gpuscope.collector.api.strict_query import only_known_parameters
from gpuscope.collector.ingest.body_rules import DEFAULT_MAX_BODY_BYTES
from gpuscope.collector.ingest.state import IngestState
from gpuscope.collector.parts import Part
from gpuscope.collector.store import allocations, rollups, timescale, usage
from gpuscope.collector.store.availability import DatabaseStatus
from gpuscope.collector.store.group_writer import MAX_GROUP, GroupWriter
from gpuscope.collector.store.migrate import migrate
from gpuscope.collector.store.retention import DEFAULT_RETENTION, Retention
from gpuscope.collector.store.retention import apply as retention_pass
from gpuscope.collector.store.route import Route
from gpuscope.collector.store.watch import watch_database
from gpuscope.collector.store.writer import InventoryCache
from gpuscope.core.pools import open_read_pool

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CollectorConfig:
    """Everything the collector core needs, resolved (tokens read, DSN known): see gpuscope/collector_process.py
    for the settings a user gives and how they become this."""

    dsn: str
    auth: TokenAuth  # ingest tokens
    # The read API's database, when it is not `dsn`: under Patroni, the same hosts with
    # target_session_attrs=prefer-standby, so reads leave the primary to ingest (docs/operations.md).
    read_dsn: str | None = None
    read_auth: TokenAuth | None = None  # None: the read API is open
    admin_auth: TokenAuth | None = None  # None: nothing may be changed through the API
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES  # ingest; every other route takes at most max_other_body_bytes
    max_other_body_bytes: int = MAX_BODY_BYTES
    read_statement_timeout_s: float | None = 10.0  # a read statement's limit, and a read request's budget
    max_concurrent_writes: int = 8
    retention: Retention = DEFAULT_RETENTION
    timescaledb: timescale.Mode = "auto"
    parts: Sequence[Part] = field(default_factory=tuple)
    # Whether the database takes writes; an embedded server's knows its data directory and supervisor.
    database: DatabaseStatus = field(default_factory=DatabaseStatus)


# Connections: a pool waits this long for one before the request is answered 503. Failed attempts to
# connect are retried by the pool for POOL_RECONNECT_S, then left to the next request: the database
# watch says when the server is back, so no request waits behind the pool's own exponential back-off.
POOL_WAIT_S = 5.0
POOL_RECONNECT_S = 3.0
CONNECT_TIMEOUT_S = 3
READ_POOL_NAME = "gpuscope collector reads"  # in pg_stat_activity: which server the read API is on


def create_app(config: CollectorConfig) -> FastIngest:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Everything opened is registered on the stack at once, so a failure half-way closes what is open.
        async with contextlib.AsyncExitStack() as stack:
            layout = await _prepare_schema(config)
            route = Route(config.dsn)  # which of the DSN's hosts connections may go to (store/route.py)
            ingest_pool = AsyncConnectionPool(
                route.dsn,
                min_size=1,
                max_size=config.max_concurrent_writes,
                open=False,
                timeout=POOL_WAIT_S,
                reconnect_timeout=POOL_RECONNECT_S,
                kwargs={"connect_timeout": CONNECT_TIMEOUT_S},
            )
            stack.push_async_callback(functools.partial(ingest_pool.close, timeout=1.0))
            await ingest_pool.open(wait=True, timeout=30)  # fail start-up fast if the database is away
            async with ingest_pool.connection() as conn:
                await retention_pass(conn, config.retention, layout=layout)  # today's partitions before any batch
            read_pool = await run_in_threadpool(
                functools.partial(
                    open_read_pool,
                    config.read_dsn or route.dsn,
                    application_name=READ_POOL_NAME,
                    statement_timeout_s=config.read_statement_timeout_s,
                    reconnect_timeout=POOL_RECONNECT_S,
                )
            )
            stack.callback(functools.partial(read_pool.close, timeout=1.0))
            cache = InventoryCache(layout)
            writers = max(1, config.max_concurrent_writes // 2)
            writer = GroupWriter(ingest_pool, cache, writers=writers, status=config.database)
            stack.push_async_callback(writer.close)
            app.state.collector = CollectorState(
                ingest_pool=ingest_pool,
                read_pool=read_pool,
                ingest=IngestState(
                    auth=config.auth,
                    max_body_bytes=config.max_body_bytes,
                    # Batches waiting for the group writer; beyond this the collector answers 503 (back-pressure).
                    write_slots=asyncio.Semaphore(config.max_concurrent_writes * MAX_GROUP),
                    writer=writer,
                    retention_s=config.retention.raw.total_seconds(),
                    cache=cache,
                    database=config.database,
                ),
                read_auth=config.read_auth,
                admin_auth=config.admin_auth,
                read_timeout_s=config.read_statement_timeout_s,
                database_metrics={part.name: part.metrics for part in config.parts if part.metrics is not None},
            )
            # Background work in one task group: it ends (each task cancelled and awaited, so their
            # connections close) before the pools close.
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(_maintenance(ingest_pool, config.retention, layout), name="maintenance")]

                async def reconnect() -> None:  # broken meanwhile, or on a server now a standby (store/watch.py)
                    cache.forget()  # before the pools reconnect, perhaps to another server
                    await ingest_pool.drain()
                    await run_in_threadpool(read_pool.drain)

                watch = watch_database(route, config.database, on_recovery=reconnect)
                tasks.append(group.create_task(watch, name="database watch"))
                for task in (t for part in config.parts for t in part.leader_tasks):
                    tasks.append(group.create_task(task.run(route.dsn), name=task.name))
                try:
                    yield
                finally:
                    for running in tasks:
                        running.cancel()

    app = FastAPI(
        title="gpuscope collector",
        version="0.1.0",
        description="Ingest for gpuscope exporters and the read API over the GPU telemetry store.",
        lifespan=lifespan,
        docs_url=None,  # api/docs.py serves it without a CDN
        redoc_url=None,  # ReDoc too would load from a CDN: one set of docs, served locally
        dependencies=[Depends(only_known_parameters)],  # every read of /api/v1 (api/strict_query.py)
    )
    docs.install(app)
    # Token, NUL bytes and body size, before any route, dependency or body model (api/guard.py).
    app.add_middleware(RequestGuard, max_body_bytes=config.max_other_body_bytes)
    errors.install(app)
    app.include_router(ingest.router)
    job_fields = tuple(extra for part in config.parts for extra in part.job_fields)
    for router in (read.router, read_nics.router, read_jobs.router, read_jobs.job_detail_router(job_fields)):
        app.include_router(router, dependencies=[Depends(require_read_token)])
    for part in config.parts:
        for router in part.routers:
            # api/guard.py checks tokens first; their routes check again. No admin token: changes are
            # switched off, so their routes are not served (the guard answers 404) nor documented.
            app.include_router(router if config.admin_auth is not None else _reads_only(router))
    app.include_router(health.router)
    return FastIngest(app)  # the ingest route's fast path in front of everything FastAPI serves


def _reads_only(router: APIRouter) -> APIRouter:
    reads = APIRouter()
    reads.routes.extend(
        r for r in router.routes if not (isinstance(r, APIRoute) and set(r.methods or ()) - READ_METHODS)
    )
    return reads


async def _prepare_schema(config: CollectorConfig) -> timescale.Layout:
    await run_in_threadpool(migrate, config.dsn)
    layout = await run_in_threadpool(timescale.setup, config.dsn, config.timescaledb)
    log.info("storage layout: %s", layout)
    for part in config.parts:
        if part.prepare is not None:
            await run_in_threadpool(part.prepare, config.dsn)  # after the layout: views read its tables
    return layout


async def _maintenance(
    pool: AsyncConnectionPool, retention: Retention, layout: timescale.Layout, every_s: float = 60.0
) -> None:
    """Close allocations whose exporter went quiet, roll up settled minutes and account the GPUs' usage
    (every minute); partitions
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
            async with pool.connection() as conn:  # after the rollups it reads
                await usage.update_usage(conn, keep=retention.minute_rollups)
            if time.monotonic() - last_partitions >= 3600:
                async with pool.connection() as conn:
                    await retention_pass(conn, retention, layout=layout)
                last_partitions = time.monotonic()
        except psycopg.Error as exc:
            log.warning("maintenance failed (will retry): %s", exc)
        except Exception:  # a bug must not end it for good, nor (in the task group) the collector
            log.exception("maintenance failed (will retry)")
