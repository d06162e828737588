"""The straggler watch as a collector part: its read API, its gauge on /metrics, its word on each job's
detail, and the watch itself as a leader task, run in one collector at a time."""

from __future__ import annotations

import asyncio
from typing import Any

from psycopg import AsyncConnection

from gpuscope.collector.parts import LeaderTask, Part
from gpuscope.stragglers.api import STRAGGLER_MODEL, router
from gpuscope.stragglers.metrics import straggler_metrics
from gpuscope.stragglers.watch import LOCK_KEY, StragglerWatch


def stragglers_part(every_s: float, run_watch: bool = True) -> Part:
    """`every_s`: between watch cycles (the collector's --straggler-interval-s).
    `run_watch` False: what the watch found is still served (API, /metrics, job detail), nothing new is found."""
    watcher = StragglerWatch()  # one per collector: it keeps what it knows across a lost and regained lead

    async def watch(conn: AsyncConnection[Any], dsn: str) -> None:
        while True:
            await watcher.cycle(conn)
            await asyncio.sleep(every_s)

    # Followers retry well within one watch interval, so a new leader is found before the next cycle.
    tasks = (LeaderTask("straggler watch", LOCK_KEY, watch, min(every_s / 3, 5.0)),) if run_watch else ()
    return Part(
        name="stragglers",
        routers=(router,),
        leader_tasks=tasks,
        metrics=straggler_metrics,
        job_fields=(STRAGGLER_MODEL,),
    )
