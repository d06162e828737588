"""A candidate policy replayed over a small stored history whose answer was worked out by hand (the
timeline in the test), beside what the live policy did; the same history and policy give the same
answer; a window without findings is refused with a clear message."""

from __future__ import annotations

import json
from datetime import timedelta

import psycopg
import pytest

from gpuscope.health.policy import HealthPolicy
from gpuscope.health.replay import ReplayError, replay
from gpuscope.health.replay_data import load_history
from tests.health.fleet import Fleet
from tests.health.helpers import at

H = 3600
START, END = at(0), at(10 * H)


def evidence(fleet: Fleet, node: str, seconds: int, severity: str, code: int, kind: str = "xid") -> None:
    fleet.telemetry.conn.execute(
        "INSERT INTO health_evidence (at, node_id, gpu_id, kind, code, severity, action, detail)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        [at(seconds), fleet.nodes[node], fleet.gpus[node][0], kind, code, severity,
         "reboot_node" if code == 79 else "reset_gpu", f"XID {code}"],
    )  # fmt: skip


def job(fleet: Fleet, node: str, job_id: str, start: int, end: int) -> None:
    fleet.telemetry.conn.execute(
        "INSERT INTO job_allocation (job_id, username, node_id, gpu_id, started_at, last_seen, ended_at)"
        " VALUES (%s, 'ada', %s, %s, %s, %s, %s)",
        [job_id, fleet.nodes[node], fleet.gpus[node][1], at(start), at(end), at(end)],
    )


def history_of_four_failures(fleet: Fleet) -> None:
    evidence(fleet, "n1", 1 * H, "unhealthy", 79)
    evidence(fleet, "n2", 1 * H + 600, "unhealthy", 48)
    for t in (2 * H, 2 * H + 1800, 3 * H):
        evidence(fleet, "n3", t, "suspect", 999)
    evidence(fleet, "n4", 5 * H, "unhealthy", 48)
    job(fleet, "n1", "j-1", 0, 8 * H)
    job(fleet, "n4", "hero-1", 0, 6 * H)
    # What the live policy did: drained n1 at 1 h, refused n2, returned n1 at 3 h.
    conn, n1, n2 = fleet.telemetry.conn, fleet.nodes["n1"], fleet.nodes["n2"]
    conn.execute(
        "INSERT INTO health_action (at, node_id, action, scheduler, dry_run, ok, detail) VALUES"
        " (%s, %s, 'drain', 'slurm', false, true, 'scontrol ...'),"
        " (%s, %s, 'refused', 'slurm', false, NULL,"
        "  'drain refused: 1 node(s) already out of service by gpuscope, ...')",
        [at(1 * H), n1, at(1 * H + 600), n2],
    )
    conn.execute(
        "INSERT INTO health_transition (at, node_id, from_state, to_state, reason, actor) VALUES"
        " (%s, %s, 'unhealthy', 'drained', 'x', 'gpuscope'), (%s, %s, 'validating', 'healthy', 'x', 'gpuscope')",
        [at(1 * H), n1, at(3 * H), n1],
    )


def run(fleet: Fleet, policy: HealthPolicy, start=START, end=END) -> dict:  # type: ignore[no-untyped-def]
    with psycopg.connect(fleet.dsn) as conn:
        history = load_history(conn, start, end, timedelta(days=7))
    return replay(policy, history, start, end).as_json()


CANDIDATE = HealthPolicy(max_drained=1, max_drained_share=1.0, quiet_s=H, protect_jobs=("^hero-",), scheduler="slurm")


def test_the_replay_answers_as_worked_out_by_hand(fleet: Fleet) -> None:
    history_of_four_failures(fleet)
    answer = run(fleet, CANDIDATE)
    # By hand: n1 out 1-2 h (XID 79: a reboot); n2 refused at 1:10 (n1 out), drained when n1 is back at 2 h;
    # n3's third suspect finding at 3 h makes it unhealthy as n2 returns: drained 3-4 h; n4 at 5 h runs the
    # protected hero-1, refused until it ends at 6 h, then out 6-7 h. Four nodes, 1 h each, 4 GPUs each.
    got = answer["candidate"]
    assert [(d["node"], d["at"], d["repair"]) for d in got["drain_list"]] == [
        ("n1", at(1 * H).isoformat(), "reboot_node"),
        ("n2", at(2 * H).isoformat(), "reset_gpu"),
        ("n3", at(3 * H).isoformat(), "reset_gpu"),
        ("n4", at(6 * H).isoformat(), "reset_gpu"),
    ]
    assert got["drains"] == 4 and got["refusals"] == {"max_drained": 1, "max_drains_per_hour": 0, "protect": 1}
    assert [(r["node"], r["rail"]) for r in got["refusal_list"]] == [("n2", "max_drained"), ("n4", "protect")]
    assert got["gpu_hours_out"] == 16.0
    assert got["jobs_hit"] == 1 and got["drain_list"][0]["jobs"] == ["j-1"]
    assert got["repairs"] == {"reboot_node": 1, "reset_gpu": 3} and got["held_for_inspection"] == 0
    live = answer["live"]
    assert (live["drains"], live["refusals"]["max_drained"], live["gpu_hours_out"], live["jobs_hit"]) == (1, 1, 8.0, 1)
    assert answer["findings"] == 6 and answer["nodes"] == 4


def test_a_looser_policy_drains_at_once_and_the_same_input_gives_the_same_answer(fleet: Fleet) -> None:
    history_of_four_failures(fleet)
    loose = HealthPolicy(max_drained=4, max_drained_share=1.0, quiet_s=H)
    first = run(fleet, loose)
    assert [(d["node"], d["at"]) for d in first["candidate"]["drain_list"]] == [
        ("n1", at(1 * H).isoformat()),
        ("n2", at(1 * H + 600).isoformat()),
        ("n3", at(3 * H).isoformat()),
        ("n4", at(5 * H).isoformat()),
    ]
    assert first["candidate"]["jobs_hit"] == 2, "j-1 and hero-1: nothing protects it here"
    assert json.dumps(run(fleet, loose), sort_keys=True) == json.dumps(first, sort_keys=True)


def test_the_ladder_climbs_in_the_replay_too(fleet: Fleet) -> None:
    for k in range(4):
        evidence(fleet, "n1", (1 + 2 * k) * H, "unhealthy", 48)
    got = run(fleet, HealthPolicy(max_drained_share=1.0, quiet_s=H))["candidate"]
    assert [d["repair"] for d in got["drain_list"]] == ["reset_gpu", "reboot_node", "reboot_node", "inspect"]
    assert got["held_for_inspection"] == 1 and got["gpu_hours_out"] == 4 * (3 * 1 + (10 - 7))


def test_a_window_without_findings_is_refused(fleet: Fleet) -> None:
    history_of_four_failures(fleet)
    with pytest.raises(ReplayError, match=r"no health evidence between .* nothing to replay"):
        run(fleet, CANDIDATE, at(20 * H), at(30 * H))


def test_a_finding_while_out_restarts_the_quiet_wait(fleet: Fleet) -> None:
    evidence(fleet, "n2", 1 * H, "unhealthy", 48)
    evidence(fleet, "n2", 1 * H + 1800, "suspect", 999)  # while drained: back at 2:30, not 2:00
    got = run(fleet, HealthPolicy(max_drained_share=1.0, quiet_s=H))["candidate"]
    assert got["drains"] == 1 and got["gpu_hours_out"] == 4 * 1.5
