"""The health loop in dry run (the default policy) over a real PostgreSQL: it records what it would do and
changes no state that counts. A node it would drain stays unhealthy (never drained: no "drained" count, no
NodeDrained alert), its would-be drain is kept (health_action, dry_run) and shown as one, the guard rails
never count these drains, and the node returns to healthy once quiet and validated, with nothing resumed."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime

import psycopg

from gpuscope.alerts import views
from gpuscope.alerts.engine import AlertEngine
from gpuscope.alerts.rules import default_rules_text, parse_rules
from gpuscope.health.holds import set_hold
from gpuscope.health.reads import health_counts, health_nodes, out_of_health
from tests.health.fleet import Fleet
from tests.health.helpers import at

WOULD_DRAIN = "would drain (dry run: nothing drained): "
NO_SCHEDULER = ("drain", True, "would run: no scheduler configured")


def health_alerts(dsn: str) -> dict[tuple[str, str], str]:
    """(alert, node) -> summary, for the shipped health rules (NodeUnhealthy, NodeDrained, NodeSuspect)
    evaluated once by the real alert engine."""
    views.apply(dsn)
    groups = [g for g in parse_rules(default_rules_text()) if g.name == "health"]
    engine = AlertEngine([dataclasses.replace(g) for g in groups], None)

    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            results = await engine.cycle(conn, datetime.now(UTC))
        assert [r.error for r in results if r.error] == []

    asyncio.run(run())
    return {(a.alertname, a.labels["node"]): a.annotations["summary"] for a in engine.instances.values()}


def test_several_unhealthy_nodes_are_each_recorded_as_would_drain_none_drained_none_refused(fleet: Fleet) -> None:
    for node in ("n1", "n2", "n3"):
        fleet.xid(node, 3, 100, 79)
    # Guard rails with room for one real drain: the dry run's own drains must not use it up.
    fleet.run(fleet.dry_run(max_drained=1, max_drains_per_hour=1), 140, 150, 160)
    for node in ("n1", "n2", "n3"):
        state, reason, _ = fleet.state(node)
        assert state == "unhealthy", node
        assert reason.startswith(WOULD_DRAIN + "XID 79") and "GPU 3" in reason, reason
        assert fleet.actions(node) == [NO_SCHEDULER], "each would-be drain recorded once, none refused"
        assert fleet.moves(node) == [("healthy", "unhealthy")], "never drained"
    with psycopg.connect(fleet.dsn) as conn:
        counts = health_counts(conn)
        assert (counts.states["unhealthy"], counts.states["drained"]) == (3, 0)
        nodes = health_nodes(conn, with_healthy=False)
        assert [(n.node, n.would_drain is not None) for n in nodes] == [("n1", True), ("n2", True), ("n3", True)]
        assert nodes[0].would_drain and nodes[0].would_drain.detail == "would run: no scheduler configured"
        assert {o.state for o in out_of_health(conn)} == {"unhealthy"}, "what /metrics gives Prometheus"
    alerts = health_alerts(fleet.dsn)
    assert set(alerts) == {("NodeUnhealthy", "n1"), ("NodeUnhealthy", "n2"), ("NodeUnhealthy", "n3")}
    assert alerts[("NodeUnhealthy", "n1")].startswith("n1 is unhealthy and not drained: " + WOULD_DRAIN)


def test_a_would_be_drained_node_returns_once_quiet_and_validated_with_nothing_resumed(fleet: Fleet) -> None:
    fleet.xid("n1", 3, 100, 79)
    health = fleet.dry_run()
    fleet.run(health, 140)
    early, checking, back = fleet.run(health, 1000, 1050, 1060)  # quiet for 15 min after the drain (at 140)
    assert early.transitions == [] and checking.transitions == [], "the check runs while the node stays unhealthy"
    assert [(m.from_state, m.to_state, m.reason) for m in back.transitions] == [
        ("unhealthy", "healthy", "validated (dry run: nothing was drained, nothing resumed)")
    ]
    assert fleet.moves("n1") == [("healthy", "unhealthy"), ("unhealthy", "healthy")], "never drained or validating"
    assert [(a, dry) for a, dry, _ in fleet.actions("n1")] == [("drain", True), ("validate", False), ("resume", True)]
    with psycopg.connect(fleet.dsn) as conn:
        assert health_nodes(conn)[0].would_drain is None, "healthy again: nothing pending"


def test_a_failed_check_keeps_the_node_unhealthy_and_waits_another_quiet_window(fleet: Fleet) -> None:
    fleet.xid("n1", 3, 100, 79)
    health = fleet.dry_run(validate_command=("sh", "-c", "test {node} = n2"), quiet_s=300)
    fleet.run(health, 140, 450, 460)
    state, reason, _ = fleet.state("n1")
    assert state == "unhealthy"
    assert (
        reason.startswith(WOULD_DRAIN + "XID 79") and "validation failed: sh -c test n1 = n2: failed (exit 1)" in reason
    )
    fleet.run(health, 700)  # 4 min after the failed check (at 460): not yet
    assert [a[0] for a in fleet.actions("n1")] == ["drain", "validate"]
    fleet.run(health, 770, 780)
    assert [a[0] for a in fleet.actions("n1")] == ["drain", "validate", "validate"]


def test_a_hold_pauses_the_dry_run_and_a_release_resumes_it_without_a_second_drain(fleet: Fleet) -> None:
    fleet.xid("n1", 3, 100, 79)
    health = fleet.dry_run()
    fleet.run(health, 140)

    async def hold(by: str | None, seconds: float) -> None:
        async with await psycopg.AsyncConnection.connect(fleet.dsn, autocommit=True) as conn:
            assert await set_hold(conn, "c", "n1", by, at(seconds))

    asyncio.run(hold("alice: firmware", 145))
    fleet.run(health, 150)
    assert fleet.state("n1")[1] == "held (alice: firmware): gpuscope takes no action"
    with psycopg.connect(fleet.dsn) as conn:
        assert health_nodes(conn, with_healthy=False)[0].would_drain is None, "held: gpuscope would do nothing"
    asyncio.run(hold(None, 155))
    fleet.run(health, 160)
    assert fleet.state("n1")[1].startswith(WOULD_DRAIN + "XID 79")
    assert [a[0] for a in fleet.actions("n1")] == ["drain", "hold", "release"]


def test_a_dry_runs_drains_do_not_count_against_a_live_policy_after_it(fleet: Fleet) -> None:
    fleet.xid("n1", 3, 100, 79)
    fleet.xid("n2", 3, 100, 79)
    fleet.run(fleet.dry_run(), 140)
    fleet.run(fleet.live(max_drains_per_hour=1), 200)  # the site switches dry_run off
    assert fleet.state("n1")[0] == "drained" and fleet.cordoned("n1")
    assert fleet.state("n2") == ("unhealthy", "drain refused: 1 drains in the last hour, the policy allows 1", None)
    assert not fleet.cordoned("n2")
