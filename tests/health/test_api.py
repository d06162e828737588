"""The health API over a real collector, after a dry run (the default policy): nodes by state with their
GPUs and evidence and the drain the dry run recorded, the audit trail, holds with the admin token only;
and `gpuscope health` reading it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from gpuscope.health.loop import HealthLoop
from gpuscope.health.policy import HealthPolicy
from tests.health.helpers import Telemetry, at
from tests.processes import RunningCollector, running_collector

ADMIN = "admin-token-for-health-tests"


@pytest.fixture
def collector(dsn: str) -> Iterator[RunningCollector]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        telemetry = Telemetry(conn)
        sick, well = telemetry.node("n1"), telemetry.node("n2")
        gpus = telemetry.gpus(sick, 4)
        telemetry.gpus(well, 2)
        telemetry.event(sick, gpus[3], 100, "xid", 79)
        telemetry.event(sick, gpus[1], 101, "xid", 13)

    async def judge() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await HealthLoop(HealthPolicy(max_drained_share=1.0)).cycle(conn, at(140))

    asyncio.run(judge())
    with running_collector(dsn, admin_token=ADMIN) as running:
        yield running


def test_nodes_states_gpus_and_evidence(collector: RunningCollector) -> None:
    nodes = httpx.get(f"{collector.url}/api/v1/health/nodes", timeout=10).json()
    assert [(n["node"], n["state"]) for n in nodes] == [("n1", "unhealthy"), ("n2", "healthy")], "least healthy first"
    sick = nodes[0]
    assert sick["cluster"] == "c" and sick["reason"].startswith("would drain (dry run: nothing drained): XID 79")
    assert sick["would_drain"]["detail"] == "would run: no scheduler configured" and nodes[1]["would_drain"] is None
    assert [(g["gpu"], g["state"]) for g in sick["gpus"]] == [
        (0, "healthy"),
        (1, "healthy"),
        (2, "healthy"),
        (3, "unhealthy"),
    ]
    assert [(e["kind"], e["code"], e["gpu"], e["severity"]) for e in sick["evidence"]] == [
        ("xid", 13, 1, "ignore"),
        ("xid", 79, 3, "unhealthy"),
    ]
    assert set(sick) >= {"cluster", "node", "state", "since", "reason", "gpus", "evidence", "would_drain"}
    named = httpx.get(f"{collector.url}/api/v1/health/nodes", params={"node": "n2"}, timeout=10).json()
    assert [(n["cluster"], n["node"]) for n in named] == [("c", "n2")]
    drained = httpx.get(f"{collector.url}/api/v1/health/nodes", params={"state": "healthy"}, timeout=10).json()
    assert [n["node"] for n in drained] == ["n2"]
    bad = httpx.get(f"{collector.url}/api/v1/health/nodes", params={"state": "sick"}, timeout=10)
    assert bad.status_code == 422


def test_transitions_and_actions_are_the_audit_trail(collector: RunningCollector) -> None:
    span = {"start": at(0).isoformat(), "end": at(3600).isoformat()}
    moves = httpx.get(f"{collector.url}/api/v1/health/transitions", params=span, timeout=10).json()
    assert [(m["node"], m["from"], m["to"], m["actor"]) for m in moves] == [("n1", "healthy", "unhealthy", "gpuscope")]
    actions = httpx.get(f"{collector.url}/api/v1/health/actions", params=span, timeout=10).json()
    assert [(a["action"], a["dry_run"]) for a in actions] == [("drain", True)]


def test_holds_want_the_admin_token_and_the_command_line_shows_them(
    collector: RunningCollector, tmp_path: Path
) -> None:
    url = f"{collector.url}/api/v1/health/nodes/c/n2/hold"
    assert httpx.put(url, json={"by": "eve"}, timeout=10).status_code == 401
    token = tmp_path / "admin"
    token.write_text(ADMIN)
    gpuscope = [sys.executable, "-m", "gpuscope.cli"]
    held = subprocess.run([*gpuscope, "health", "hold", "n2", "--by", "alice", "--reason", "bios",
                           "--collector", collector.url, "--token-file", str(token)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert held.returncode == 0, held.stderr
    assert held.stdout.strip() == "c/n2: held by alice: bios"
    status = subprocess.run([*gpuscope, "health", "status", "--all", "--collector", collector.url],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[0] == "healthy: 1  suspect: 0  unhealthy: 1  drained: 0  validating: 0  held: 1"
    assert lines[1].startswith("c/n1  unhealthy since") and lines[1].endswith("[dry run: would drain, nothing drained]")
    assert "c/n2  healthy since" in status.stdout and "[held: alice: bios]" in status.stdout
    as_json = subprocess.run([*gpuscope, "health", "status", "--json", "--collector", collector.url],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert [n["node"] for n in json.loads(as_json.stdout)] == ["n1", "n2"]
    missing = httpx.delete(
        f"{collector.url}/api/v1/health/nodes/c/n9/hold", headers={"Authorization": f"Bearer {ADMIN}"}
    )
    assert missing.status_code == 404
