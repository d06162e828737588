"""The health loop's states over a real PostgreSQL, in dry run (the real Slurm test, tests/slurm, runs it
live): evidence moves a node, the guard rails refuse and say why, a quiet node is validated and returns,
holds and protected jobs are obeyed, and a window read twice changes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from gpuscope.health.holds import set_hold
from gpuscope.health.loop import CycleReport, HealthLoop
from gpuscope.health.policy import HealthPolicy
from tests.health.helpers import Telemetry, at, every_step

GPUS = 4
SAMPLED = (-60, 1500)  # every GPU reports up from here to here, every 10 s
ROOMY = {"max_drained_share": 1.0}  # a 4-node test fleet: 10% would be no node at all


class Fleet:
    def __init__(self, dsn: str, telemetry: Telemetry) -> None:
        self.dsn = dsn
        self.telemetry = telemetry
        self.nodes = {name: telemetry.node(name) for name in ("n1", "n2", "n3", "n4")}
        self.gpus = {name: telemetry.gpus(node_id, GPUS) for name, node_id in self.nodes.items()}
        for gpu_ids in self.gpus.values():
            for gpu_id in gpu_ids:
                telemetry.gpu_samples(gpu_id, {t: {"remap_pending": 0} for t in every_step(*SAMPLED)})

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
        """Cycles at these times, in one event loop (validations run as tasks between cycles)."""

        async def cycles() -> list[CycleReport]:
            reports = []
            async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
                for t in seconds:
                    reports.append(await loop.cycle(conn, at(t)))
                    await asyncio.sleep(0.2)  # a validation command finishes
            return reports

        return asyncio.run(cycles())


@pytest.fixture
def fleet(dsn: str) -> Iterator[Fleet]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield Fleet(dsn, Telemetry(conn))


def loop(**policy: Any) -> HealthLoop:
    return HealthLoop(HealthPolicy(**{**ROOMY, **policy}))


def test_an_xid_79_drains_the_node_and_it_returns_after_a_quiet_validated_window(fleet: Fleet) -> None:
    fleet.xid("n1", 3, 100, 79)
    health = loop()
    first, again = fleet.run(health, 140, 150)
    assert [(m.from_state, m.to_state) for m in first.transitions] == [
        ("healthy", "unhealthy"),
        ("unhealthy", "drained"),
    ]
    state, reason, _ = fleet.state("n1")
    assert state == "drained" and "XID 79" in reason and "GPU 3" in reason and "dry run" in reason
    assert fleet.actions("n1") == [("drain", True, "would run: no scheduler configured")]
    assert again.new_evidence == 0 and again.transitions == [], "the same window again changes nothing"
    assert fleet.state("n2")[0] == "healthy"
    # Quiet for 15 minutes after the drain (at 140): validated, then back.
    early, validating, back = fleet.run(health, 1000, 1050, 1060)
    assert early.transitions == []
    assert [m.to_state for m in validating.transitions] == ["validating"]
    assert [m.to_state for m in back.transitions] == ["healthy"]
    assert fleet.moves("n1")[-2:] == [("drained", "validating"), ("validating", "healthy")]
    assert [a[0] for a in fleet.actions("n1")] == ["drain", "validate", "resume"]


def test_an_application_xid_is_kept_as_evidence_and_moves_nothing(fleet: Fleet) -> None:
    fleet.xid("n1", 0, 100, 13)
    (report,) = fleet.run(loop(), 140)
    assert report.new_evidence == 1 and report.transitions == []
    assert fleet.state("n1")[0] == "healthy"


def test_the_drain_limit_refuses_the_next_node_and_says_why_once(fleet: Fleet) -> None:
    fleet.xid("n1", 3, 100, 79)
    fleet.xid("n2", 1, 100, 79)
    fleet.run(loop(max_drained=1), 140, 150, 160)
    assert fleet.state("n1")[0] == "drained"
    state, reason, _ = fleet.state("n2")
    assert state == "unhealthy"
    assert reason.startswith("drain refused: 1 node(s) already out of service by gpuscope, the policy allows 1")
    assert [a[0] for a in fleet.actions("n2")] == ["refused"], "said once, not every cycle"


def test_a_share_that_rounds_to_no_node_drains_nothing(fleet: Fleet) -> None:
    fleet.xid("n1", 3, 100, 79)
    fleet.run(HealthLoop(HealthPolicy()), 140)  # the defaults: 10% of 4 nodes
    state, reason, _ = fleet.state("n1")
    assert state == "unhealthy" and "the policy allows 0" in reason and "max_drained_share 0.1 of 4 nodes" in reason


def test_the_rate_limit_refuses_a_drain_past_its_count_in_an_hour(fleet: Fleet) -> None:
    fleet.xid("n1", 3, 100, 79)
    fleet.xid("n2", 1, 100, 79)
    fleet.run(loop(max_drains_per_hour=1), 140)
    assert fleet.state("n1")[0] == "drained"
    assert fleet.state("n2")[1] == "drain refused: 1 drains in the last hour, the policy allows 1"


def test_a_node_running_a_protected_job_is_not_drained(fleet: Fleet) -> None:
    fleet.telemetry.conn.execute(
        "INSERT INTO job_allocation (job_id, username, node_id, gpu_id, started_at, last_seen)"
        " VALUES ('hero-7', 'ada', %s, %s, %s, %s)",
        [fleet.nodes["n1"], fleet.gpus["n1"][0], at(-600), at(100)],
    )
    fleet.xid("n1", 3, 100, 79)
    fleet.run(loop(protect_jobs=("^hero-",)), 140)
    state, reason, _ = fleet.state("n1")
    assert state == "unhealthy"
    assert reason == "drain refused: it runs job hero-7 (ada), protected by protect_jobs '^hero-'"


def test_a_failed_validation_keeps_the_node_out_and_the_node_name_reaches_the_command(fleet: Fleet) -> None:
    fleet.xid("n1", 3, 100, 79)
    fleet.xid("n2", 3, 100, 79)
    health = loop(validate_command=("sh", "-c", "test {node} = n2"))
    fleet.run(health, 140, 1050, 1060)
    state, reason, _ = fleet.state("n1")
    assert state == "drained" and reason.startswith("validation failed: sh -c test n1 = n2: failed (exit 1)")
    assert fleet.state("n2")[0] == "healthy"


def test_a_node_waits_drained_while_a_gpu_does_not_report(fleet: Fleet) -> None:
    fleet.xid("n1", 3, 100, 79)
    fleet.telemetry.conn.execute("DELETE FROM gpu_sample WHERE gpu_id = %s AND ts > %s", [fleet.gpus["n1"][2], at(500)])
    fleet.run(loop(), 140, 1050)
    state, reason, _ = fleet.state("n1")
    assert state == "drained" and "waiting: GPU 2 has not reported" in reason


def test_suspect_findings_escalate_at_the_third_and_clear_after_a_quiet_hour(fleet: Fleet) -> None:
    for t, code in ((100, 9001), (200, 9002), (300, 9003)):  # XIDs outside NVIDIA's catalogue: suspect
        fleet.xid("n1", 0, t, code)
    fleet.xid("n2", 0, 100, 9001)
    health = loop()
    fleet.run(health, 140, 240)
    assert fleet.state("n1")[0] == "suspect"
    fleet.run(health, 340)
    assert fleet.state("n1")[0] == "drained" and fleet.moves("n1")[1] == ("suspect", "unhealthy")
    assert fleet.state("n2")[0] == "suspect"
    fleet.run(health, 100 + 3600 + 40)
    assert fleet.state("n2")[0] == "healthy"


def test_a_held_node_is_judged_but_never_drained(fleet: Fleet) -> None:
    async def hold() -> None:
        async with await psycopg.AsyncConnection.connect(fleet.dsn, autocommit=True) as conn:
            assert await set_hold(conn, "c", "n1", "alice: firmware update", at(50))
            assert not await set_hold(conn, "c", "nowhere", "alice", at(50))

    asyncio.run(hold())
    fleet.xid("n1", 3, 100, 79)
    fleet.run(loop(), 140, 150)
    state, reason, held = fleet.state("n1")
    assert (state, held) == ("unhealthy", "alice: firmware update")
    assert reason == "held (alice: firmware update): gpuscope takes no action"
    assert [a[0] for a in fleet.actions("n1")] == ["hold"], "no drain, not even in dry run"
