"""Health episodes and repair outcomes through a real collector (read token required): the routes' JSON
with every figure, a missing episode a 404, and `gpuscope health episodes | episode | repairs` reading them
as an operator types them, bad input refused in one line before the collector is asked."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.commands import GPUSCOPE, token_file
from tests.health.episode_rows import add_episode
from tests.health.helpers import Telemetry
from tests.processes import RunningCollector, running_collector

READ = "read-token-for-episode-tests"
MONTH = str(30 * 24 * 60)  # minutes


@dataclass(frozen=True)
class Site:
    collector: RunningCollector
    ids: dict[str, int]  # A1, A2 on node a (the second 3 days after the first's return), B1 open on node b
    uuid: str  # node a's GPU 3, which A1 and A2 name
    token: Path

    def get(self, path: str, **params: str | int) -> httpx.Response:
        return httpx.get(f"{self.collector.url}/api/v1/health/{path}", params=params,
                         headers={"Authorization": f"Bearer {READ}"}, timeout=10)  # fmt: skip


@pytest.fixture
def site(dsn: str, tmp_path: Path) -> Iterator[Site]:
    now = datetime.now(UTC)

    def ago(days: float = 0, hours: float = 0) -> datetime:
        return now - timedelta(days=days, hours=hours)

    with psycopg.connect(dsn, autocommit=True) as conn:
        telemetry = Telemetry(conn)
        a, b = telemetry.node("a"), telemetry.node("b")
        gpu3 = telemetry.gpus(a, 8)[3]
        telemetry.gpus(b, 8)
        reboot = {"gpu_id": gpu3, "gpus_out": 8, "repair": "reboot_node", "rung": 1}
        ids = {
            "A1": add_episode(conn, a, "xid:79", ago(20), ago(20) + timedelta(minutes=10), ago(19.5), "returned",
                              **reboot, repair_reason="2nd xid:79 within 7 d", repair_result="rebooted",
                              validation="passed"),
            "A2": add_episode(conn, a, "xid:79", ago(16.5), ago(16.5), ago(16), "returned", **reboot,
                              validation="failed: dcgmi diag -r 2", failed_test="memory bandwidth"),
            "B1": add_episode(conn, b, "gpu_lost", ago(hours=3), ago(hours=2), None, "open", gpus_out=8),
        }  # fmt: skip
        conn.execute(
            "INSERT INTO health_evidence (at, node_id, gpu_id, kind, code, severity, action, detail)"
            " VALUES (%s, %s, %s, 'xid', 79, 'unhealthy', 'reboot_node', 'XID 79 on GPU 3')",
            [ago(20), a, gpu3],
        )
        conn.execute(
            "INSERT INTO health_action (at, node_id, action, scheduler, dry_run, ok, detail)"
            " VALUES (%s, %s, 'drain', 'slurm', false, true, 'scontrol drain')",
            [ago(20) + timedelta(minutes=10), a],
        )
        uuid = str(conn.execute("SELECT uuid FROM gpu WHERE gpu_id = %s", [gpu3]).fetchone()[0])  # type: ignore[index]
    with running_collector(dsn, read_token=READ) as running:
        yield Site(running, ids, uuid, token_file(tmp_path / "read", READ))


def health(site: Site | None, *args: str) -> subprocess.CompletedProcess[str]:
    """`gpuscope health ARGS` against the site's collector (None: nothing listens, port 9)."""
    options = ["--collector", "http://127.0.0.1:9"]
    if site is not None:
        options = ["--collector", site.collector.url, "--token-file", str(site.token)]
    return subprocess.run([*GPUSCOPE, "health", *args, *options], capture_output=True, text=True, timeout=60)


def one_line_error(result: subprocess.CompletedProcess[str], needle: str) -> None:
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr and needle in result.stderr, result.stderr
    assert sum("error" in line.lower() for line in result.stderr.splitlines()) == 1, result.stderr


def test_the_episodes_with_what_followed(site: Site) -> None:
    assert httpx.get(f"{site.collector.url}/api/v1/health/episodes", timeout=10).status_code == 401, "read token"
    found = site.get("episodes", minutes=MONTH).json()
    assert [e["episode_id"] for e in found] == [site.ids["B1"], site.ids["A2"], site.ids["A1"]], "newest first"
    b1, a2, a1 = found
    assert (a1["cluster"], a1["node"], a1["gpu"], a1["gpu_uuid"], a1["scope"]) == ("c", "a", 3, site.uuid, "node")
    assert (a1["out_s"], a1["gpus_out"], a1["gpu_hours"]) == (12 * 3600 - 600, 8, pytest.approx(8 * 42600 / 3600))
    assert (a1["failed_again_7d"], a1["failed_again_30d"], a1["next_episode_id"]) == (True, True, site.ids["A2"])
    assert (a2["failed_again_7d"], a2["failed_again_30d"], a2["failed_test"]) == (False, None, "memory bandwidth")
    assert (b1["outcome"], b1["back_at"], b1["failed_again_7d"]) == ("open", None, None)
    assert b1["out_s"] == pytest.approx(7200, abs=60)
    assert datetime.fromisoformat(a1["started_at"]) < datetime.fromisoformat(a1["back_at"]), "times in ISO 8601"
    assert set(a1) >= {"cause", "cause_detail", "out_at", "outcome", "rung", "repair", "repair_reason",
                       "repair_result", "validation", "dry_run"}  # fmt: skip
    assert [e["node"] for e in site.get("episodes", minutes=MONTH, node="b").json()] == ["b"]
    assert [e["node"] for e in site.get("episodes", minutes=MONTH, gpu=site.uuid).json()] == ["a", "a"]
    assert site.get("episodes", minutes=MONTH, cluster="elsewhere").json() == []
    assert [e["episode_id"] for e in site.get("episodes", minutes=60).json()] == [site.ids["B1"]], "open: overlaps"


def test_one_episode_and_a_missing_one(site: Site) -> None:
    record = site.get(f"episodes/{site.ids['A1']}").json()
    assert record["episode_id"] == site.ids["A1"] and record["repair_result"] == "rebooted"
    assert [(e["kind"], e["code"], e["gpu"], e["detail"]) for e in record["evidence"]] == [
        ("xid", 79, 3, "XID 79 on GPU 3")
    ]
    assert record["evidence_count"] == 1
    assert [(a["action"], a["ok"], a["detail"]) for a in record["actions"]] == [("drain", True, "scontrol drain")]
    missing = site.get("episodes/999999")
    assert (missing.status_code, missing.json()["detail"]) == (404, "no episode 999999")
    assert site.get("episodes/0").status_code == 422


def test_repair_outcomes(site: Site) -> None:
    [row] = site.get("repairs", minutes=MONTH).json()
    # A1 failed again on day 3; A2 back 16 days ago: held a week, too early for a month.
    assert row == {"cause": "xid:79", "repair": "reboot_node", "returned": 2,
                   "held_7d": 1, "failed_7d": 1, "too_early_7d": 0, "held_rate_7d": 0.5,
                   "held_30d": 0, "failed_30d": 1, "too_early_30d": 1, "held_rate_30d": 0.0}  # fmt: skip
    assert site.get("repairs", minutes=MONTH, cluster="elsewhere").json() == []
    assert site.get("repairs", minutes=60).json() == [], "none came back in the last hour"


def test_the_command_line_tables(site: Site) -> None:
    listed = health(site, "episodes", "--minutes", MONTH)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0] == f"Episodes in the last {MONTH} min, newest first: 3 (?: not known yet)"
    assert lines[1].split() == ["when", "(UTC)", "node", "GPU", "cause", "repair", "out", "for", "GPU-h", "outcome",
                                "failed", "again", "7", "d/30", "d"]  # fmt: skip
    assert re.fullmatch(r"\S+ \S+ c/b - gpu_lost - 2 h [01] min 16\.\d open \?/\?", " ".join(lines[2].split()))
    assert " ".join(lines[3].split()).endswith("c/a 3 xid:79 reboot_node 12 h 0 min 96.0 returned no/?")
    assert lines[4] == "    failed test: memory bandwidth"
    assert " ".join(lines[5].split()).endswith("c/a 3 xid:79 reboot_node 11 h 50 min 94.7 returned yes/yes")
    as_json = health(site, "episodes", "--node", "b", "--json")
    assert [e["node"] for e in json.loads(as_json.stdout)] == ["b"], as_json.stderr
    one = health(site, "episode", str(site.ids["A1"]))
    assert one.returncode == 0, one.stderr
    text = one.stdout
    assert text.startswith(f"Episode {site.ids['A1']}: c/a, GPU 3 ({site.uuid}), node scope\n")
    assert "  repair: reboot_node (ladder step 2): 2nd xid:79 within 7 d\n" in text
    assert f"  failed again within 7 d: yes, within 30 d: yes (episode {site.ids['A2']})\n" in text
    assert "Evidence, newest first: 1\n" in text and "unhealthy XID 79 on GPU 3\n" in text
    assert "Scheduler actions, newest first: 1\n" in text and "drain: scontrol drain" in text
    repairs = health(site, "repairs", "--minutes", MONTH)
    assert repairs.returncode == 0, repairs.stderr
    assert " ".join(repairs.stdout.splitlines()[2].split()) == "xid:79 reboot_node 2 1 1 0 50% 0 1 0%"
    quiet = health(site, "repairs", "--minutes", "1")
    assert quiet.stdout.strip() == "no failure came back into service in the last 1 min"


def test_a_missing_episode_and_bad_input(site: Site) -> None:
    missing = health(site, "episode", "999999")
    assert missing.returncode == 1 and "no episode 999999 (HTTP 404)" in missing.stderr, missing
    one_line_error(health(None, "episode", "abc"), "must be an episode's number, got 'abc'")
    one_line_error(health(None, "episode", "0"), "must be from 1 to 9223372036854775807, got 0")
    one_line_error(health(None, "episodes", "--range", "99x"), "--range: unknown range '99x'")
    one_line_error(health(None, "repairs", "--minutes", "0"), "--minutes: must be from 1 to 1152000")
