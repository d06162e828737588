"""`gpuscope health replay` and `GET /api/v1/health/replay` over a real collector: the answer, the same
twice; a bad policy named by file (CLI) or by key and line (API); a window without data refused; and a
replay that never runs the scheduler's client even when the candidate names one."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.commands import GPUSCOPE
from tests.health.helpers import Telemetry, at
from tests.processes import RunningCollector, running_collector

WINDOW = {"start": at(0).isoformat(), "end": at(6 * 3600).isoformat()}


@pytest.fixture
def collector(dsn: str) -> Iterator[RunningCollector]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        telemetry = Telemetry(conn)
        for name, t, code in (("n1", 3600, 79), ("n2", 3700, 48)):
            node = telemetry.node(name)
            gpu = telemetry.gpus(node, 8)[0]
            conn.execute(
                "INSERT INTO health_evidence (at, node_id, gpu_id, kind, code, severity, action, detail)"
                " VALUES (%s, %s, %s, 'xid', %s, 'unhealthy', 'reset_gpu', 'XID')",
                [at(t), node, gpu, code],
            )
    with running_collector(dsn) as running:
        yield running


def post(collector: RunningCollector, policy: str, **window: str) -> httpx.Response:
    params = {"policy": policy, **WINDOW, **window}
    return httpx.get(f"{collector.url}/api/v1/health/replay", params=params, timeout=30)


def test_the_api_answers_the_same_twice_and_a_tighter_policy_refuses(collector: RunningCollector) -> None:
    loose = post(collector, "max_drained_share: 1.0\nquiet_s: 900\n")
    assert loose.status_code == 200, loose.text
    assert loose.json()["candidate"]["drains"] == 2 and loose.json()["candidate"]["gpu_hours_out"] == 2 * 8 * 0.25
    assert post(collector, "max_drained_share: 1.0\nquiet_s: 900\n").json() == loose.json()
    tight = post(collector, "max_drained: 1\nmax_drained_share: 1.0\nquiet_s: 900\n").json()["candidate"]
    assert tight["drains"] == 2 and tight["refusals"]["max_drained"] == 1, "n2 waits for n1's return"


def test_the_api_says_what_is_wrong(collector: RunningCollector) -> None:
    bad = post(collector, "max_drained: 2\nladder: [inspect, reset_gpu]\n")
    assert bad.status_code == 422 and "policy:2: ladder: step 2 (reset_gpu) comes after inspect" in bad.text
    empty = post(collector, "{}", start=at(86400).isoformat(), end=at(2 * 86400).isoformat())
    assert empty.status_code == 422 and "no health evidence between" in empty.text
    backwards = post(collector, "{}", start=at(600).isoformat(), end=at(0).isoformat())
    assert backwards.status_code == 422 and "must be after start" in backwards.text


def replay_cli(collector: RunningCollector, policy: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GPUSCOPE, "health", "replay", "--policy", str(policy), "--start", WINDOW["start"], "--end", WINDOW["end"],
         "--collector", collector.url],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_cli_prints_both_sides_and_never_runs_the_scheduler(collector: RunningCollector, tmp_path: Path) -> None:
    marker = tmp_path / "scontrol-ran"
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f"#!/bin/sh\ntouch {marker}\n")
    scontrol.chmod(0o755)
    policy = tmp_path / "candidate.yaml"
    policy.write_text(f"scheduler: slurm\ndry_run: false\nscontrol: {scontrol}\nmax_drained_share: 1.0\n")
    ran = replay_cli(collector, policy)
    assert ran.returncode == 0, ran.stderr
    drains = next(line for line in ran.stdout.splitlines() if line.startswith("drains"))
    assert drains.split()[1:] == ["2", "0"], ran.stdout
    assert not marker.exists(), "a replay never talks to a scheduler"


def test_the_cli_names_the_file_and_line_of_a_bad_policy(collector: RunningCollector, tmp_path: Path) -> None:
    policy = tmp_path / "candidate.yaml"
    policy.write_text("max_drained: 2\nmax_drainz: 3\n")
    ran = replay_cli(collector, policy)
    assert ran.returncode == 2 and f"{policy}:2: max_drainz" in ran.stderr and "Traceback" not in ran.stderr


def test_a_policy_as_long_as_allowed_is_answered_and_a_longer_one_refused(collector: RunningCollector) -> None:
    from gpuscope.health.replay_api import MAX_POLICY_CHARS

    body = "max_drained_share: 1.0\nquiet_s: 900\n"
    padded = body + "# " + "a note on the policy, a long one; " * (MAX_POLICY_CHARS // 34) + "\n"
    padded = padded[: MAX_POLICY_CHARS - 1] + "\n"
    assert post(collector, padded).status_code == 200, "every character URL-encoded, within the request line"
    too_long = post(collector, padded + "#")
    assert too_long.status_code == 422 and "at most" in too_long.text
