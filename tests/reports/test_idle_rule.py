"""The shipped JobHoldsIdleGpus rule (waste: half a running job's GPUs idle) against a real database."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt

import psycopg

from gpuscope.alerts import views
from gpuscope.alerts.engine import AlertEngine
from gpuscope.alerts.rules import default_rules_text, parse_rules
from tests.alerts.telemetry import add_node, gpu_sample


def _allocate(dsn: str, job: str, user: str, gpu_ids: list[int]) -> None:
    with psycopg.connect(dsn) as conn:
        for gpu_id in gpu_ids:
            conn.execute(
                "INSERT INTO job_allocation (job_id, username, account, node_id, gpu_id, started_at, last_seen)"
                " SELECT %s, %s, 'physics', node_id, gpu_id, now() - interval '3 hours', now() FROM gpu"
                " WHERE gpu_id = %s",
                (job, user, gpu_id),
            )


def test_a_job_holding_half_its_gpus_idle_fires_after_two_hours(dsn: str) -> None:
    views.apply(dsn)
    gpus = add_node(dsn, "n1", gpus=4)
    for gpu_id, util in zip(gpus, (0.0, 2.0, 95.0, 90.0), strict=True):  # waste: 2 of 4 idle
        gpu_sample(dsn, gpu_id, util_pct=util)
    _allocate(dsn, "wasteful", "carol", gpus)
    others = add_node(dsn, "n2", gpus=4)
    for gpu_id, util in zip(others, (0.0, 80.0, 95.0, 90.0), strict=True):  # 1 of 4: a job at work
        gpu_sample(dsn, gpu_id, util_pct=util)
    _allocate(dsn, "busy", "dave", others)
    groups = [
        dataclasses.replace(g, rules=tuple(r for r in g.rules if r.alert == "JobHoldsIdleGpus"))
        for g in parse_rules(default_rules_text())
    ]
    engine = AlertEngine([g for g in groups if g.rules], None)
    now = dt.datetime.now(dt.UTC)

    async def cycle(at: dt.datetime) -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            results = await engine.cycle(conn, at)
        assert [r.error for r in results if r.error] == []

    asyncio.run(cycle(now))
    (alert,) = engine.instances.values()
    assert (alert.labels["job_id"], alert.labels["user"], alert.labels["account"], alert.labels["gpus"]) == (
        "wasteful", "carol", "physics", "4",
    )  # fmt: skip
    assert (alert.state, alert.value, alert.labels["severity"]) == ("pending", 2.0, "info")
    asyncio.run(cycle(now + dt.timedelta(hours=2, minutes=1)))
    assert [a.state for a in engine.instances.values()] == ["firing"]
