"""Fleet health as a collector part: its API, its gauge on /metrics, and the health loop as a leader task
(one collector at a time runs it, like the straggler watch and the alert engine)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from psycopg import AsyncConnection

from gpuscope.collector.parts import LeaderTask, Part
from gpuscope.health.api import router
from gpuscope.health.loop import LOCK_KEY, HealthLoop
from gpuscope.health.metrics import node_health_metrics
from gpuscope.health.policy import HealthPolicy
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

    async def watch(conn: AsyncConnection[Any], dsn: str) -> None:
        mode = "dry run" if policy.dry_run else "live"
        log.info("health loop leading: scheduler %s, %s, every %.0f s", policy.scheduler, mode, policy.every_s)
        while True:
            await loop.cycle(conn)
            await asyncio.sleep(policy.every_s)

    tasks = (LeaderTask("health loop", LOCK_KEY, watch, min(policy.every_s / 3, 5.0)),) if run_loop else ()
    return Part(name="health", routers=(router,), leader_tasks=tasks, metrics=node_health_metrics)
