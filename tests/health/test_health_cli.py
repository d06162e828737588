"""`gpuscope health` as an operator types it, against a real collector after a dry run: a hold finds the
node's cluster by its name (and says so in one line where none or several have it), status counts and
lists the held nodes, history labels its two parts, and bad numbers are refused before the collector is
asked."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from gpuscope.collector.api.params import MAX_RANGE
from gpuscope.health.cli import MAX_MINUTES
from gpuscope.health.loop import HealthLoop
from gpuscope.health.policy import HealthPolicy
from tests.commands import GPUSCOPE, token_file
from tests.health.helpers import Telemetry, at
from tests.processes import RunningCollector, running_collector

ADMIN = "admin-token-for-health-cli-tests"


@pytest.fixture
def collector(dsn: str) -> Iterator[RunningCollector]:
    """Cluster c: n1 (an XID 79 the dry run would drain on), n2, node-005; cluster d: another n2."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        telemetry = Telemetry(conn)
        sick = telemetry.node("n1")
        telemetry.node("n2")
        telemetry.node("node-005")
        conn.execute("INSERT INTO node (cluster, name, rack) VALUES ('d', 'n2', 'r')")
        telemetry.event(sick, telemetry.gpus(sick, 4)[3], 100, "xid", 79)

    async def judge() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await HealthLoop(HealthPolicy(max_drained_share=1.0)).cycle(conn, at(140))

    asyncio.run(judge())
    with running_collector(dsn, admin_token=ADMIN) as running:
        yield running


def health(
    *args: str, collector: str = "http://127.0.0.1:9", token: Path | None = None
) -> subprocess.CompletedProcess[str]:
    options = ["--collector", collector, *(["--token-file", str(token)] if token else [])]
    return subprocess.run([*GPUSCOPE, "health", *args, *options], capture_output=True, text=True, timeout=60)


def one_line_error(result: subprocess.CompletedProcess[str], needle: str) -> None:
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr and needle in result.stderr, result.stderr
    assert sum("error" in line.lower() for line in result.stderr.splitlines()) == 1, result.stderr


def test_a_hold_finds_the_nodes_cluster_by_name(collector: RunningCollector, tmp_path: Path) -> None:
    admin = token_file(tmp_path / "admin", ADMIN)
    held = health("hold", "node-005", "--by", "alice", collector=collector.url, token=admin)
    assert (held.returncode, held.stdout.strip()) == (0, "c/node-005: held by alice"), held.stderr
    released = health("release", "node-005", collector=collector.url, token=admin)
    assert (released.returncode, released.stdout.strip()) == (0, "c/node-005: hold lifted"), released.stderr
    twice = health("hold", "n2", "--by", "alice", collector=collector.url, token=admin)
    one_line_error(twice, "node 'n2' is in clusters c, d: say which with --cluster")
    nowhere = health("hold", "node-999", "--by", "alice", collector=collector.url, token=admin)
    one_line_error(nowhere, "no node 'node-999' in any cluster the collector knows")
    chosen = health("hold", "n2", "--cluster", "d", "--by", "bob", collector=collector.url, token=admin)
    assert (chosen.returncode, chosen.stdout.strip()) == (0, "d/n2: held by bob"), chosen.stderr


def test_status_counts_and_lists_the_held_nodes(collector: RunningCollector, tmp_path: Path) -> None:
    admin = token_file(tmp_path / "admin", ADMIN)
    assert health("hold", "node-005", "--by", "alice", collector=collector.url, token=admin).returncode == 0
    everyone = health("status", collector=collector.url)
    assert everyone.returncode == 0, everyone.stderr
    assert everyone.stdout.splitlines()[0] == "healthy: 3  suspect: 0  unhealthy: 1  drained: 0  validating: 0  held: 1"
    held = health("status", "--state", "held", collector=collector.url)
    assert held.returncode == 0, held.stderr
    lines = held.stdout.splitlines()
    assert lines[0] == "healthy: 1  suspect: 0  unhealthy: 0  drained: 0  validating: 0  held: 1"
    assert lines[1].startswith("c/node-005  healthy since") and lines[1].endswith("[held: alice]")
    assert len(lines) == 2, "only the held node"


def test_history_labels_the_transitions_and_the_scheduler_actions(collector: RunningCollector) -> None:
    history = health("history", "--minutes", str(MAX_MINUTES), collector=collector.url)  # the dry run was at T0
    assert history.returncode == 0, history.stderr
    lines = history.stdout.splitlines()
    assert lines[0] == "Transitions (state changes), newest first: 1"
    assert lines[1].startswith("  ") and "c/n1  healthy -> unhealthy  (gpuscope): XID 79" in lines[1]
    assert lines[2] == "Scheduler actions (drains, resumes, validations, refusals, holds), newest first: 1"
    assert "c/n1  drain (dry run: not run): would run: no scheduler configured" in lines[3]
    empty = health("history", "--minutes", "1", collector=collector.url)
    assert empty.stdout.strip() == "nothing happened in the last 1 min"


@pytest.mark.parametrize(
    ("minutes", "needle"),
    [
        ("-5", "--minutes: must be from 1 to 1152000 (800 days), got -5"),
        ("0", "--minutes: must be from 1 to 1152000 (800 days), got 0"),
        ("1152001", "got 1152001"),
        ("a day", "--minutes: must be a whole number of minutes, got 'a day'"),
    ],
)
def test_bad_minutes_are_refused_before_the_collector_is_asked(minutes: str, needle: str) -> None:
    one_line_error(health("history", "--minutes", minutes), needle)  # no collector listens on port 9


def test_the_longest_history_is_the_apis_longest_range() -> None:
    assert MAX_RANGE.total_seconds() // 60 == MAX_MINUTES


def test_history_takes_the_uis_range_words(collector: RunningCollector) -> None:
    """One vocabulary: the span the Health page's URL says (range=FROM..TO), also on the command line."""
    span = f"{at(-3600):%Y-%m-%dT%H:%M}..{at(3600):%Y-%m-%dT%H:%M}"
    history = health("history", "--range", span, collector=collector.url)
    assert history.returncode == 0, history.stderr
    assert history.stdout.splitlines()[0] == "Transitions (state changes), newest first: 1"
    quiet = f"{at(-7200):%Y-%m-%dT%H:%M}..{at(-3600):%Y-%m-%dT%H:%M}"
    empty = health("history", "--range", quiet, collector=collector.url)
    assert empty.stdout.strip() == f"nothing happened in range {quiet}"
    one_line_error(health("history", "--range", "99x"), "--range: unknown range '99x': one of 15m, 1h")
