"""Fleet health as a collector part: its API, its gauge on /metrics, and the health loop as a leader task
sharded by node across the collectors that run it (like the straggler watch, by job)."""

from __future__ import annotations

import asyncio
import logging

from gpuscope.collector.parts import Part, ShardedTask
from gpuscope.core.shards import ShardLease
from gpuscope.health.api import router
from gpuscope.health.loop import LOCK_KEY, HealthLoop
from gpuscope.health.metrics import node_health_metrics
from gpuscope.health.policy import HealthPolicy
from gpuscope.health.replay_api import router as replay_router
from gpuscope.health.schedulers.base import Scheduler
from gpuscope.health.schedulers.kubernetes import KubernetesScheduler
from gpuscope.health.schedulers.slurm import SlurmScheduler

log = logging.getLogger(__name__)


def scheduler_for(policy: HealthPolicy) -> Scheduler | None:
    if policy.scheduler == "slurm":
        return SlurmScheduler(policy.scontrol)
    if policy.scheduler == "kubernetes":
        return KubernetesScheduler()
    return None


def health_part(policy: HealthPolicy | None = None, run_loop: bool = True) -> Part:
    policy = policy or HealthPolicy()
    loop = HealthLoop(policy, scheduler_for(policy))  # one per collector: it keeps its validations across a lost lead

    async def watch(lease: ShardLease, dsn: str) -> None:
        mode = "dry run" if policy.dry_run else "live"
        log.info("health loop joined: scheduler %s, %s, every %.0f s", policy.scheduler, mode, policy.every_s)
        while True:
            await lease.rebalance()  # between rounds: a node is never judged by two loops at once
            await loop.cycle(lease.conn, shards=lease)
            await asyncio.sleep(policy.every_s)

    # Sharded by node: each collector running the loop judges about 1/k of the nodes (core/shards.py); the
    # guard rails stay the fleet's, counted and decided under one lock in the database (health/store.py).
    tasks = (ShardedTask("health loop", LOCK_KEY, watch, min(policy.every_s / 3, 5.0)),) if run_loop else ()
    return Part(name="health", routers=(router, replay_router), leader_tasks=tasks, metrics=node_health_metrics)
