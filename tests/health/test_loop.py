"""The health loop's states over a real PostgreSQL, live through the Kubernetes stand-in (the real Slurm
test, tests/slurm, runs it against slurmctld; the dry run has tests/health/test_dry_run.py): evidence moves
a node, the guard rails refuse and say why, a quiet node is validated and returns, holds and protected jobs
are obeyed, and a window read twice changes nothing."""

from __future__ import annotations

import asyncio

import psycopg

from gpuscope.health.holds import set_hold
from tests.health.fleet import Fleet
from tests.health.helpers import at


def test_an_xid_79_drains_the_node_and_it_returns_after_a_quiet_validated_window(fleet: Fleet) -> None:
    fleet.xid("n1", 3, 100, 79)
    health = fleet.live()
    first, again = fleet.run(health, 140, 150)
    assert [(m.from_state, m.to_state) for m in first.transitions] == [
        ("healthy", "unhealthy"),
        ("unhealthy", "drained"),
    ]
    state, reason, _ = fleet.state("n1")
    assert state == "drained" and "XID 79" in reason and "GPU 3" in reason and "dry run" not in reason
    [(action, dry_run, detail)] = fleet.actions("n1")
    assert (action, dry_run) == ("drain", False) and detail.startswith("cordon n1") and fleet.cordoned("n1")
    assert again.new_evidence == 0 and again.transitions == [], "the same window again changes nothing"
    assert fleet.state("n2")[0] == "healthy"
    # Quiet for 15 minutes after the drain (at 140): validated, then back.
    early, validating, back = fleet.run(health, 1000, 1050, 1060)
    assert early.transitions == []
    assert [m.to_state for m in validating.transitions] == ["validating"]
    assert [m.to_state for m in back.transitions] == ["healthy"]
    assert fleet.moves("n1")[-2:] == [("drained", "validating"), ("validating", "healthy")]
    assert [a[0] for a in fleet.actions("n1")] == ["drain", "validate", "resume"]
    assert not fleet.cordoned("n1")


def test_an_application_xid_is_kept_as_evidence_and_moves_nothing(fleet: Fleet) -> None:
    fleet.xid("n1", 0, 100, 13)
    (report,) = fleet.run(fleet.live(), 140)
    assert report.new_evidence == 1 and report.transitions == []
    assert fleet.state("n1")[0] == "healthy"


def test_the_drain_limit_refuses_the_next_node_and_says_why_once(fleet: Fleet) -> None:
    fleet.xid("n1", 3, 100, 79)
    fleet.xid("n2", 1, 100, 79)
    fleet.run(fleet.live(max_drained=1), 140, 150, 160)
    assert fleet.state("n1")[0] == "drained"
    state, reason, _ = fleet.state("n2")
    assert state == "unhealthy"
    assert reason.startswith("drain refused: 1 node(s) already out of service by gpuscope, the policy allows 1")
    assert [a[0] for a in fleet.actions("n2")] == ["refused"], "said once, not every cycle"


def test_a_share_that_rounds_to_no_node_drains_nothing(fleet: Fleet) -> None:
    fleet.xid("n1", 3, 100, 79)
    fleet.run(fleet.live(max_drained_share=0.1), 140)  # the default share: 10% of 4 nodes
    state, reason, _ = fleet.state("n1")
    assert state == "unhealthy" and "the policy allows 0" in reason and "max_drained_share 0.1 of 4 nodes" in reason


def test_the_rate_limit_refuses_a_drain_past_its_count_in_an_hour(fleet: Fleet) -> None:
    fleet.xid("n1", 3, 100, 79)
    fleet.xid("n2", 1, 100, 79)
    fleet.run(fleet.live(max_drains_per_hour=1), 140)
    assert fleet.state("n1")[0] == "drained"
    assert fleet.state("n2")[1] == "drain refused: 1 drains in the last hour, the policy allows 1"


def test_a_node_running_a_protected_job_is_not_drained(fleet: Fleet) -> None:
    fleet.telemetry.conn.execute(
        "INSERT INTO job_allocation (job_id, username, node_id, gpu_id, started_at, last_seen)"
        " VALUES ('hero-7', 'ada', %s, %s, %s, %s)",
        [fleet.nodes["n1"], fleet.gpus["n1"][0], at(-600), at(100)],
    )
    fleet.xid("n1", 3, 100, 79)
    fleet.run(fleet.live(protect_jobs=("^hero-",)), 140)
    state, reason, _ = fleet.state("n1")
    assert state == "unhealthy"
    assert reason == "drain refused: it runs job hero-7 (ada), protected by protect_jobs '^hero-'"


def test_a_failed_validation_keeps_the_node_out_and_the_node_name_reaches_the_command(fleet: Fleet) -> None:
    fleet.xid("n1", 3, 100, 79)
    fleet.xid("n2", 3, 100, 79)
    health = fleet.live(validate_command=("sh", "-c", "test {node} = n2"))
    fleet.run(health, 140, 1050, 1060)
    state, reason, _ = fleet.state("n1")
    assert state == "drained" and reason.startswith("validation failed: sh -c test n1 = n2: failed (exit 1)")
    assert fleet.state("n2")[0] == "healthy"


def test_a_node_waits_drained_while_a_gpu_does_not_report(fleet: Fleet) -> None:
    fleet.xid("n1", 3, 100, 79)
    fleet.telemetry.conn.execute("DELETE FROM gpu_sample WHERE gpu_id = %s AND ts > %s", [fleet.gpus["n1"][2], at(500)])
    fleet.run(fleet.live(), 140, 1050)
    state, reason, _ = fleet.state("n1")
    assert state == "drained" and "waiting: GPU 2 has not reported" in reason


def test_suspect_findings_escalate_at_the_third_and_clear_after_a_quiet_hour(fleet: Fleet) -> None:
    for t, code in ((100, 9001), (200, 9002), (300, 9003)):  # XIDs outside NVIDIA's catalogue: suspect
        fleet.xid("n1", 0, t, code)
    fleet.xid("n2", 0, 100, 9001)
    health = fleet.live()
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
    fleet.run(fleet.live(), 140, 150)
    state, reason, held = fleet.state("n1")
    assert (state, held) == ("unhealthy", "alice: firmware update")
    assert reason == "held (alice: firmware update): gpuscope takes no action"
    assert [a[0] for a in fleet.actions("n1")] == ["hold"], "no drain"
