"""The straggler watch as a collector part: its read API, its gauge on /metrics, its word on each job's
detail, and the watch itself as a leader task sharded by job across the collectors that run it."""

from __future__ import annotations

import asyncio

from gpuscope.collector.parts import Part, ShardedTask
from gpuscope.core.shards import ShardLease
from gpuscope.stragglers.api import STRAGGLER_MODEL, router
from gpuscope.stragglers.metrics import straggler_metrics
from gpuscope.stragglers.watch import LOCK_KEY, StragglerWatch


def stragglers_part(every_s: float, run_watch: bool = True) -> Part:
    """`every_s`: between watch cycles (the collector's --straggler-interval-s).
    `run_watch` False: what the watch found is still served (API, /metrics, job detail), nothing new is found."""
    watcher = StragglerWatch()  # one per collector: it keeps what it knows across a lost and regained lead

    async def watch(lease: ShardLease, dsn: str) -> None:
        watcher.forget()  # a new lease: another collector may have led these jobs meanwhile
        while True:
            await lease.rebalance()  # between cycles: a job is never fed by two watches at once
            await watcher.cycle(lease.conn, owns=lease.owns)
            await asyncio.sleep(every_s)

    # Sharded by job: each collector running the watch leads about 1/k of the jobs (core/shards.py). A
    # collector that failed rejoins well within one watch interval.
    tasks = (ShardedTask("straggler watch", LOCK_KEY, watch, min(every_s / 3, 5.0)),) if run_watch else ()
    return Part(
        name="stragglers",
        routers=(router,),
        leader_tasks=tasks,
        metrics=straggler_metrics,
        job_fields=(STRAGGLER_MODEL,),
    )
