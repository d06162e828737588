"""What an extension brings to the collector: schema work at start, routes, leader tasks, figures for
/metrics and fields of the job detail.

The collector core (main.py) knows only this shape. The alert engine (alerts/part.py), the straggler
watch (stragglers/part.py), fleet health (health/part.py) and the reports (reports/part.py) each describe
themselves as a Part, and the composition root (gpuscope/collector_process.py) hands the list to
create_app, so the core imports none of them, nor reads their tables.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter
from psycopg import AsyncConnection

from gpuscope.collector.api.read_jobs import JobDetailField
from gpuscope.collector.api.state import DatabaseMetrics
from gpuscope.core.leader import Dsn, lead_shards, lead_when_free, resolve
from gpuscope.core.shards import ShardLease


@dataclass(frozen=True)
class LeaderTask:
    """A loop that runs in one collector at a time: the holder of `lock_key` runs `lead` on its lock
    connection (with the DSN, to open more) until it ends or fails; the others retry every `retry_s`."""

    name: str
    lock_key: int
    lead: Callable[[AsyncConnection[Any], str], Awaitable[None]]
    retry_s: float

    async def run(self, dsn: Dsn) -> None:
        """Forever: lead while this process holds the lock, else wait to take over. `dsn` may be a
        callable, asked at each connection (the collector's route, collector/store/route.py)."""

        async def lead(conn: AsyncConnection[Any]) -> None:
            await self.lead(conn, resolve(dsn))

        await lead_when_free(dsn, self.lock_key, lead, self.name, retry_s=self.retry_s)


@dataclass(frozen=True)
class ShardedTask:
    """A loop whose work is split by key (a job, a node) across the collectors running it: each leads the
    shards it holds (gpuscope/core/shards.py), and calls `lease.rebalance()` between two rounds, then
    works the keys `lease.owns`. `lead(lease, dsn)` runs on the lease's connection (`lease.conn`)."""

    name: str
    lock_key: int
    lead: Callable[[ShardLease, str], Awaitable[None]]
    retry_s: float

    async def run(self, dsn: Dsn) -> None:
        """Forever: lead this collector's shards; rejoin when the connection fails."""

        async def lead(lease: ShardLease) -> None:
            await self.lead(lease, resolve(dsn))

        await lead_shards(dsn, self.lock_key, lead, self.name, retry_s=self.retry_s)


@dataclass(frozen=True)
class Part:
    name: str
    # Schema work after the store's migrations and storage layout (views read the tables the layout made).
    prepare: Callable[[str], object] | None = None
    routers: tuple[APIRouter, ...] = ()  # each route checks its own token (collector/api/deps.py)
    leader_tasks: tuple[LeaderTask | ShardedTask, ...] = ()
    # Its metric families, read from the database at each scrape of /metrics; left out when the read fails.
    metrics: DatabaseMetrics | None = None
    # What it adds to GET /api/v1/jobs/{job_id}, beside the job and its GPUs.
    job_fields: tuple[JobDetailField, ...] = ()
