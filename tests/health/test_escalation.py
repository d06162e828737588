"""Episodes and the escalation ladder through the live loop (Kubernetes stand-in, real PostgreSQL): one
node failing four times for the same cause climbs reset -> reboot -> reboot -> held for inspection, each
failure one episode with its repair, its check and its time out; the held node never returns by itself
and still counts against the guard rails; a finding that asks for more than the ladder's step gets it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.faults.harness import gone
from tests.health.fleet import Fleet
from tests.health.helpers import at
from tests.waiting import eventually_async

QUIET = {"quiet_s": 60}


def failure_and_return(fleet: Fleet, loop: Any, node: str, gpu: int, code: int, t: int) -> None:
    """An XID at t, then the cycles that drain (t+40), record the repair (t+50), validate (t+120) and return
    the node (t+130), if nothing holds it."""
    fleet.xid(node, gpu, t, code)
    fleet.run(loop, t + 40, t + 50, t + 120, t + 130)


def episodes(fleet: Fleet, node: str) -> list[dict[str, Any]]:
    cur = fleet.telemetry.conn.execute(
        "SELECT e.cause, g.gpu_index, e.rung, e.repair, e.outcome, e.started_at, e.out_at, e.back_at, e.gpus_out,"
        "       e.repair_result, e.validation, e.scope, e.dry_run"
        " FROM health_episode e LEFT JOIN gpu g USING (gpu_id) WHERE e.node_id = %s ORDER BY e.episode_id",
        [fleet.nodes[node]],
    )
    names = [d.name for d in cur.description or []]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def test_a_node_failing_again_climbs_the_ladder_and_is_held_for_inspection(fleet: Fleet, tmp_path: Path) -> None:
    log = tmp_path / "repairs.log"
    steps = ("reset_gpu", "reboot_node")
    commands = {step: ["/bin/sh", "-c", f'echo "{step} $0 $1" >> {log}', "{node}", "{gpu}"] for step in steps}
    loop = fleet.live(repair_commands=commands, max_drained=1, **QUIET)
    for t in (100, 300, 500):
        failure_and_return(fleet, loop, "n1", 2, 48, t)
        assert fleet.state("n1")[0] == "healthy", f"back after the failure at {t}"
    fleet.xid("n1", 2, 700, 48)
    fleet.run(loop, 740, 750, 820, 830, 1200)

    found = episodes(fleet, "n1")
    assert [(e["cause"], e["gpu_index"], e["rung"], e["repair"], e["outcome"]) for e in found] == [
        ("xid:48", 2, 0, "reset_gpu", "returned"),
        ("xid:48", 2, 1, "reboot_node", "returned"),
        ("xid:48", 2, 2, "reboot_node", "returned"),
        ("xid:48", 2, 3, "inspect", "held"),
    ]
    assert log.read_text().splitlines() == ["reset_gpu n1 2", "reboot_node n1 2", "reboot_node n1 2"]
    for e, t in zip(found[:3], (100, 300, 500), strict=True):
        assert (e["started_at"], e["out_at"], e["back_at"]) == (at(t), at(t + 40), at(t + 130))
        assert e["gpus_out"] == 4 and e["scope"] == "node" and not e["dry_run"]
        assert e["repair_result"].endswith(": done") and "passed" in e["validation"]
    held = found[3]
    assert held["back_at"] is None and held["out_at"] == at(740)
    state, reason, held_by = fleet.state("n1")
    assert state == "drained" and fleet.cordoned("n1"), "never returned by itself, however quiet"
    assert held_by is not None and held_by.startswith("gpuscope inspection: 4th failure of xid:48 within 7 d")
    assert "held for hardware inspection" in reason
    assert [a[0] for a in fleet.actions("n1")].count("resume") == 3

    # The held node counts against max_drained (1): the next node's drain is refused.
    fleet.xid("n2", 0, 1300, 79)
    fleet.run(loop, 1340)
    state, reason, _ = fleet.state("n2")
    assert state == "unhealthy" and reason.startswith("drain refused: 1 node(s) already out of service")


def test_the_finding_sets_a_floor_and_a_quiet_week_starts_the_ladder_again(fleet: Fleet) -> None:
    loop = fleet.live(ladder=["reset_gpu", "reboot_node"], ladder_window_s=250, **QUIET)
    failure_and_return(fleet, loop, "n1", 0, 79, 100)  # XID 79 asks for a reboot: step 1 is raised to it
    failure_and_return(fleet, loop, "n1", 0, 48, 300)  # another cause: its own count
    failure_and_return(fleet, loop, "n1", 0, 48, 500)  # the same cause within 250 s: step 2
    failure_and_return(fleet, loop, "n1", 0, 48, 800)  # 300 s after the last: the window has passed
    found = episodes(fleet, "n1")
    assert [(e["cause"], e["rung"], e["repair"]) for e in found] == [
        ("xid:79", 0, "reboot_node"),
        ("xid:48", 0, "reset_gpu"),
        ("xid:48", 1, "reboot_node"),
        ("xid:48", 0, "reset_gpu"),
    ]
    reasons = fleet.telemetry.conn.execute(
        "SELECT repair_reason, repair_result FROM health_episode WHERE node_id = %s ORDER BY episode_id",
        [fleet.nodes["n1"]],
    ).fetchall()
    assert "raised to reboot_node: the finding asks for it" in reasons[0][0]
    assert reasons[2][0].startswith("2nd failure of xid:48 within")
    assert all("no repair command configured" in result for _, result in reasons)


def test_a_suspect_episode_that_clears_is_recorded_as_cleared(fleet: Fleet) -> None:
    loop = fleet.live(suspect_clear_s=600)
    fleet.xid("n3", 1, 100, 999)  # an XID the catalogue does not know: suspect
    fleet.run(loop, 140, 800)
    [episode] = episodes(fleet, "n3")
    assert (episode["outcome"], episode["out_at"], episode["back_at"]) == ("cleared", None, at(800))
    assert episode["rung"] is None


def test_a_dry_run_records_the_repair_it_would_choose(fleet: Fleet) -> None:
    loop = fleet.dry_run(**QUIET)
    fleet.xid("n4", 3, 100, 48)
    fleet.run(loop, 140)
    [episode] = episodes(fleet, "n4")
    assert (episode["repair"], episode["rung"], episode["dry_run"], episode["out_at"]) == ("reset_gpu", 0, True, None)
    assert episode["outcome"] == "open"


FAKE_DCGMI = Path(__file__).parent / "fake_bin" / "dcgmi"


def test_a_failed_check_names_its_test_in_the_episode(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_DCGMI_MODE", "memory_gpu3")
    loop = fleet.live(validation={"preset": "dcgm_diag", "dcgmi": str(FAKE_DCGMI)}, **QUIET)
    fleet.xid("n2", 3, 100, 48)
    fleet.run(loop, 140, 210, 220)  # drained; validating; the check failed: back to drained
    assert fleet.state("n2")[0] == "drained"
    [failed] = episodes(fleet, "n2")
    assert failed["outcome"] == "open" and "GPU Memory" in failed["validation"]
    monkeypatch.setenv("FAKE_DCGMI_MODE", "pass")
    fleet.run(loop, 290, 300)  # quiet again from the failed check: validating, passed, back
    assert fleet.state("n2")[0] == "healthy"
    [back] = fetch_failed_tests(fleet, "n2")
    assert back == ("returned", "GPU Memory (GPU 3)"), "the failing test stays named after the pass"


def fetch_failed_tests(fleet: Fleet, node: str) -> list[tuple[str, str]]:
    rows = fleet.telemetry.conn.execute(
        "SELECT outcome, failed_test FROM health_episode WHERE node_id = %s ORDER BY episode_id", [fleet.nodes[node]]
    )
    return [tuple(r) for r in rows.fetchall()]  # type: ignore[misc]


def test_an_operator_resume_calls_off_the_repair_under_way(fleet: Fleet, tmp_path: Path) -> None:
    """The node resumed by an operator mid-repair: the repair's command is killed and its outcome is not
    booked to the node's next episode, whose own step is recorded instead."""
    started = tmp_path / "started"
    slow = {"reset_gpu": ["/bin/sh", "-c", f"echo $$ > {started}; exec sleep 60"]}
    loop = fleet.live(repair_commands=slow, quiet_s=600)
    fleet.xid("n1", 2, 100, 48)

    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(fleet.dsn, autocommit=True) as conn:
            await loop.cycle(conn, at(140))  # drained; the reset starts
            await eventually_async(lambda: started.exists(), what="the repair command running", timeout=10)
            with fleet.server.lock:
                fleet.server.nodes["n1"]["spec"].pop("unschedulable", None)  # an operator resumes it
            await loop.cycle(conn, at(150))
            await eventually_async(lambda: gone(int(started.read_text())), what="the repair killed", timeout=5)

    asyncio.run(scenario())
    assert fleet.state("n1")[0] == "healthy"
    fleet.xid("n1", 2, 300, 79)
    fleet.run(loop, 340)
    first, second = episodes(fleet, "n1")
    assert (first["outcome"], first["repair_result"]) == ("resumed_by_operator", None)
    assert second["repair"] == "reboot_node" and second["repair_result"].startswith("recommended: reboot the node")
