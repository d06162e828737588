"""A four-node test fleet for the health loop over a real PostgreSQL (n1..n4, four GPUs each, every GPU
reporting up): XIDs written as events, the loop's states, actions and transitions read back. A live loop
drains and resumes through the Kubernetes adapter against the stand-in API server (tests/health/api_server.py,
the same nodes); a dry run has no scheduler, as the default policy."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from kubernetes import client

from gpuscope.health.loop import CycleReport, HealthLoop
from gpuscope.health.policy import HealthPolicy
from gpuscope.health.schedulers.kubernetes import KubernetesScheduler
from tests.health.api_server import ApiServer
from tests.health.helpers import Telemetry, at, every_step

NAMES = ("n1", "n2", "n3", "n4")
GPUS = 4
SAMPLED = (-60, 1500)  # every GPU reports up from here to here, every 10 s
ROOMY = {"max_drained_share": 1.0}  # a 4-node test fleet: 10% would be no node at all


class Fleet:
    def __init__(self, dsn: str, telemetry: Telemetry, server: ApiServer) -> None:
        self.dsn = dsn
        self.telemetry = telemetry
        self.server = server
        self.nodes = {name: telemetry.node(name) for name in NAMES}
        self.gpus = {name: telemetry.gpus(node_id, GPUS) for name, node_id in self.nodes.items()}
        for gpu_ids in self.gpus.values():
            for gpu_id in gpu_ids:
                telemetry.gpu_samples(gpu_id, {t: {"remap_pending": 0} for t in every_step(*SAMPLED)})

    def dry_run(self, **policy: Any) -> HealthLoop:
        return HealthLoop(HealthPolicy(**{**ROOMY, **policy}))

    def live(self, **policy: Any) -> HealthLoop:
        api = client.CoreV1Api(client.ApiClient(client.Configuration(host=self.server.url)))
        settings = {**ROOMY, "scheduler": "kubernetes", "dry_run": False, **policy}
        return HealthLoop(HealthPolicy(**settings), KubernetesScheduler(api))

    def cordoned(self, node: str) -> bool:
        """Whether the scheduler (the stand-in) has the node out of service."""
        return bool(self.server.nodes[node]["spec"].get("unschedulable"))

    def xid(self, node: str, gpu: int, seconds: float, code: int) -> None:
        self.telemetry.event(self.nodes[node], self.gpus[node][gpu], seconds, "xid", code)

    def state(self, node: str) -> tuple[str, str, str | None]:
        row = self.telemetry.conn.execute(
            "SELECT state, reason, held_by FROM health_node WHERE node_id = %s", [self.nodes[node]]
        ).fetchone()
        return ("healthy", "", None) if row is None else (row[0], row[1], row[2])

    def actions(self, node: str) -> list[tuple[str, bool, str]]:
        rows = self.telemetry.conn.execute(
            "SELECT action, dry_run, detail FROM health_action WHERE node_id = %s ORDER BY action_id",
            [self.nodes[node]],
        )
        return [tuple(r) for r in rows.fetchall()]  # type: ignore[misc]

    def moves(self, node: str) -> list[tuple[str, str]]:
        rows = self.telemetry.conn.execute(
            "SELECT from_state, to_state FROM health_transition WHERE node_id = %s ORDER BY transition_id",
            [self.nodes[node]],
        )
        return [tuple(r) for r in rows.fetchall()]  # type: ignore[misc]

    def run(self, loop: HealthLoop, *seconds: float) -> list[CycleReport]:
        """Cycles at these times, in one event loop (checks and repairs run as tasks between cycles)."""

        async def cycles() -> list[CycleReport]:
            reports = []
            async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
                for t in seconds:
                    reports.append(await loop.cycle(conn, at(t)))
                    await loop.settle(30)  # the checks and repairs it started finish before the next cycle
            return reports

        return asyncio.run(cycles())
