"""`gpuscope demo` as a user runs it: ready within 60 s with live data; within its first minutes the
staged story (a straggler the real watch finds, an idle job, an XID, a flapping link, a rack near its
budget) shows on the pages a newcomer opens, history and live data join without a seam, and SIGINT
leaves nothing behind. One demo serves the whole module: starting it is most of the cost."""

from __future__ import annotations

import itertools
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import httpx
import numpy as np
import pytest

from gpuscope.bench.browser import graph_data, open_page, screenshot, wait_until
from gpuscope.demo_scenario import IDLE_JOB, TRAINING_JOB
from tests.collector.helpers import postmaster_pids
from tests.waiting import eventually

READY_WITHIN_S = 60
STORY_WITHIN_S = 300  # the promise: a straggler on /jobs and the overview within 5 minutes
# A test that needs the staged straggler active waits for it itself, not on an earlier test's sighting:
# staged for 8 h, it may still end a while under load, its samples late (stragglers/detector.py: gone
# 30 s ends it, present 30 s declares it again).
REDECLARED_WITHIN_S = 120


@dataclass
class Demo:
    process: subprocess.Popen[str]
    started: float
    lines: list[str] = field(default_factory=list)
    live_at: datetime | None = None  # when the banner came: the live data began a little before

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def address(self, pattern: str) -> str:
        found = re.search(pattern, self.output)
        assert found, self.output
        return found.group(1)


@pytest.fixture(scope="module")
def demo() -> Iterator[Demo]:
    process = subprocess.Popen(
        [sys.executable, "-m", "gpuscope.cli", "demo", "--dashboard-port", "0", "--collector-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    running = Demo(process, time.monotonic())
    try:
        assert process.stdout is not None
        for line in process.stdout:
            running.lines.append(line)
            if "Press Ctrl-C" in line:
                running.live_at = datetime.now(UTC)
                break
        yield running
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.communicate(timeout=60)


def dash_callback(base: str) -> dict:
    """Ask the overview page's callback for its outputs, exactly as the browser does."""
    outputs = [
        {"id": "overview-status", "property": "children"},
        {"id": "fleet-summary", "property": "children"},
        {"id": "attention", "property": "children"},
        {"id": "util-heatmap", "property": "figure"},
        {"id": "rack-power", "property": "figure"},
    ]
    payload = {
        "output": "..overview-status.children...fleet-summary.children...attention.children..."
        "util-heatmap.figure...rack-power.figure..",
        "outputs": outputs,
        "inputs": [
            {"id": "refresh", "property": "n_intervals", "value": 1},
            {"id": "range", "property": "value", "value": "15m"},
        ],
        "changedPropIds": ["refresh.n_intervals"],
    }
    response = httpx.post(f"{base}/_dash-update-component", json=payload, timeout=30)
    response.raise_for_status()
    return response.json()["response"]


def test_demo_serves_a_live_cluster(demo: Demo) -> None:
    assert "Press Ctrl-C" in demo.output, demo.output
    base = demo.address(r"dashboard\s+(http://127\.0\.0\.1:\d+)")
    data_dir = Path(demo.address(r"data\s+(\S+) \(temporary\)"))
    assert httpx.get(base, timeout=10).status_code == 200
    response = dash_callback(base)
    assert time.monotonic() - demo.started < READY_WITHIN_S
    summary = json.dumps(response["fleet-summary"])
    assert "128 / 128" in summary, summary
    heatmap = response["util-heatmap"]["figure"]["data"][0]
    assert len(heatmap["y"]) == 128
    assert len(response["rack-power"]["figure"]["data"]) == 4
    assert postmaster_pids(data_dir), "the embedded PostgreSQL should be running"
    collector = demo.address(r"collector\s+(http://127\.0\.0\.1:\d+)/docs")
    assert f"{base}/alerts" in demo.output, "the banner links the alerts page, not raw JSON"

    def every_rule() -> list[dict]:
        rules = httpx.get(f"{collector}/api/v1/alerts/rules", timeout=10).json()
        assert len(rules) >= 13, rules
        return rules

    rules = eventually(every_rule, timeout=20, interval=0.5, what="the alert engine to list the 13 default rules")
    assert [r["alertname"] for r in rules if r["error"]] == [], "the default rules run on the demo's data"


def test_history_and_live_data_join_without_a_seam(demo: Demo, browser: Any) -> None:
    """Every column of the last 15 minutes holds data for most GPUs, and the fleet's power never falls
    away at the join: the back-filled history ends a few seconds before the live samples begin."""
    base = demo.address(r"dashboard\s+(http://127\.0\.0\.1:\d+)")
    assert demo.live_at is not None, demo.output
    live_at = demo.live_at
    open_page(browser, f"{base}/?range=15m")

    def live_bucket_drawn() -> bool:  # a whole bucket of live data after the join (the page refreshes itself)
        buckets = sorted({_utc(x) for trace in graph_data(browser, "rack-power") for x in trace["x"]})
        return len(buckets) > 1 and buckets[-2] >= live_at  # the newest bucket is still filling

    wait_until(browser, live_bucket_drawn, timeout=60, what="a whole bucket of live data after the join")
    heat = wait_until(browser, lambda: [t for t in graph_data(browser, "util-heatmap") if t["z"]], what="heatmap")
    z = np.array(heat[0]["z"], dtype=float)
    filled = np.isfinite(z).mean(axis=0)[:-1]  # the newest column is still filling
    assert filled.min() > 0.9, f"a column with data for only {filled.min():.0%} of the GPUs: {filled.round(2)}"
    # The fleet's power around the join (the demo's start), summed over the racks' stacks bucket by bucket:
    # none missing, none fallen away. Away from the join, the simulated jobs come and go and so may power.
    launched = datetime.now(UTC) - timedelta(seconds=time.monotonic() - demo.started)
    fleet: dict[datetime, float] = {}
    for trace in graph_data(browser, "rack-power"):
        for x, y in zip(trace["x"], trace["y"], strict=True):
            at = _utc(x)
            fleet[at] = fleet.get(at, 0.0) + (0.0 if y is None else float(y))
    times = sorted(fleet)[:-1]  # the newest bucket is still filling
    near = [t for t in times if abs((t - launched).total_seconds()) <= 120]
    assert near, f"no bucket near the join at {launched:%H:%M:%S}: {times[0]}..{times[-1]}"
    steps = {(b - a).total_seconds() for a, b in itertools.pairwise(near)}
    assert len(steps) <= 1, f"a bucket is missing at the join: {near}"
    power = np.array([fleet[t] for t in near])
    assert power.min() > 0.6 * np.median(power), f"total power dips at the join: {power.round(0)}"


def test_a_week_and_a_custom_span_render_from_the_address(demo: Demo, browser: Any) -> None:
    base = demo.address(r"dashboard\s+(http://127\.0\.0\.1:\d+)")
    open_page(browser, f"{base}/?range=7d")
    wait_until(browser, lambda: graph_data(browser, "util-heatmap")[0]["z"], what="a week's heatmap")
    assert "7d" in _text(browser, "range")
    start = datetime.now(UTC) - timedelta(minutes=50)
    key = f"{start:%Y-%m-%dT%H:%M}..{start + timedelta(minutes=20):%Y-%m-%dT%H:%M}"
    open_page(browser, f"{base}/heatmap?range={key}&metric=power_w")
    heat = wait_until(browser, lambda: graph_data(browser, "heatmap-graph")[0], what="the custom span's heatmap")
    first, last = (datetime.fromisoformat(str(x)).replace(tzinfo=UTC) for x in (heat["x"][0], heat["x"][-1]))
    assert start - timedelta(minutes=1) <= first and last <= start + timedelta(minutes=20)
    assert np.isfinite(np.array(heat["z"], dtype=float)).all(), "history fills the span"
    assert "UTC" in _text(browser, "heatmap-range"), "the span is labelled among the presets"


@pytest.mark.timeout(STORY_WITHIN_S + 120)
def test_the_staged_story_shows_within_minutes(demo: Demo, browser: Any) -> None:
    base = demo.address(r"dashboard\s+(http://127\.0\.0\.1:\d+)")
    collector = demo.address(r"collector\s+(http://127\.0\.0\.1:\d+)/docs")
    culprit = re.search(r"the fan of GPU (\d+) on (\S+) fails", demo.output)
    assert culprit, demo.output
    gpu, node = int(culprit.group(1)), culprit.group(2).rstrip(";")
    left = STORY_WITHIN_S - (time.monotonic() - demo.started)
    found = eventually(
        lambda: active_staged_straggler(collector),
        timeout=left,
        interval=2,
        what="the watch to find the staged straggler",
    )
    assert (found["node"], found["gpu"], found["cause"]) == (node, gpu, "thermal"), found
    assert 0.15 < found["slowdown"] < 0.35, "the staged fault makes every step 25% longer"
    others = [s for s in httpx.get(f"{collector}/api/v1/stragglers", timeout=10).json() if s["job_id"] != TRAINING_JOB]
    assert others == [], f"only the staged straggler: the everyday jobs are healthy {others}"

    open_page(browser, base)
    attention = wait_until(
        browser,
        lambda: _text(browser, "attention") if TRAINING_JOB in _text(browser, "attention") else None,
        what="the straggler on the overview",
    )
    assert f"job {TRAINING_JOB} (alice): straggler {node} GPU {gpu}" in attention
    assert "budget" in attention, "the staged rack near its power budget is listed"
    idle = int(browser.find_element("id", "gpus-idle").text.split()[0])
    assert idle >= 8, "the idle job's node counts as idle in a job"
    # The idle job was idle for 45 minutes when the demo started: its alerts fire from the data at once.
    wait_until(browser, lambda: f"job {IDLE_JOB} (hiro)" in _text(browser, "attention"), what="the idle job")
    screenshot(browser, "demo-overview-story")
    assert time.monotonic() - demo.started < STORY_WITHIN_S

    browser.find_element("link text", f"job {TRAINING_JOB}").click()
    wait_until(browser, lambda: f"/jobs/{TRAINING_JOB}?" in browser.current_url + "?", what="the job page")
    open_page(browser, f"{base}/jobs")
    wait_until(browser, lambda: TRAINING_JOB in _text(browser, "page") and IDLE_JOB in _text(browser, "page"))
    row = next(r.text for r in browser.find_elements("css selector", "tr") if TRAINING_JOB in r.text)
    assert node in row or "thermal" in row, f"the jobs list shows the straggler: {row}"
    screenshot(browser, "demo-jobs-story")

    def alerts() -> set[str]:
        firing = httpx.get(f"{collector}/api/v1/alerts", timeout=10).json()
        names = {a["labels"]["alertname"] for a in firing}
        assert {"JobStraggler", "GpuXidError", "InfinibandErrorsIncreasing"} <= names, names
        return names

    eventually(alerts, timeout=60, interval=2, what="the staged XID and flapping link to raise their alerts")


def test_links_lead_from_a_finding_to_its_node_its_job_and_back(demo: Demo, browser: Any) -> None:
    """Every number one click from its cause: the overview's straggler -> its node -> the job running
    there -> another of the job's nodes; and the search box finds a node, a job's user, a job."""
    base = demo.address(r"dashboard\s+(http://127\.0\.0\.1:\d+)")
    collector = demo.address(r"collector\s+(http://127\.0\.0\.1:\d+)/docs")
    culprit = re.search(r"the fan of GPU (\d+) on (\S+) fails", demo.output)
    assert culprit, demo.output
    node, where = culprit.group(2).rstrip(";"), f"{culprit.group(2).rstrip(';')} GPU {culprit.group(1)}"
    open_page(browser, base)
    left = max(STORY_WITHIN_S - (time.monotonic() - demo.started), REDECLARED_WITHIN_S)
    wait_until(
        browser,  # the overview lists active stragglers only, and refreshes itself
        lambda: active_staged_straggler(collector) and browser.find_element("link text", where),
        timeout=left,
        what="the culprit, while its straggler is active",
    ).click()
    wait_until(browser, lambda: f"/node/{node}?" in browser.current_url + "?", what="the culprit's node page")
    wait_until(browser, lambda: browser.find_element("link text", TRAINING_JOB), what="its job").click()
    wait_until(browser, lambda: f"/jobs/{TRAINING_JOB}?" in browser.current_url + "?", what="the job page")

    def another_node() -> Any:
        links = browser.find_elements("css selector", "#page a[href^='/node/']")
        return next((a for a in links if a.text.startswith("node-") and a.text != node), None)

    other = wait_until(browser, another_node, what="a link to another of the job's nodes")
    name = unquote(urlparse(other.get_attribute("href")).path.rsplit("/", 1)[-1])
    other.click()
    wait_until(browser, lambda: f"/node/{name}?" in browser.current_url + "?", what="the other node's page")

    box = browser.find_element("id", "nav-search")
    box.send_keys(f"{name}\n")  # one match: straight to it
    wait_until(browser, lambda: f"/node/{name}?" in browser.current_url + "?" and not box.get_attribute("value"))
    browser.find_element("id", "nav-search").send_keys("alice\n")  # a user: the results page
    wait_until(browser, lambda: "/search?q=alice" in browser.current_url, what="the search page")
    results = wait_until(browser, lambda: _text(browser, "search-results"), what="search results")
    assert "alice" in results, results
    browser.find_element("css selector", "#search-users a").click()
    wait_until(browser, lambda: "user=alice" in browser.current_url, what="the user's jobs")
    wait_until(browser, lambda: TRAINING_JOB in _text(browser, "page"), what="the user's training job listed")
    screenshot(browser, "demo-search-user")


def active_staged_straggler(collector: str) -> dict:
    """The staged training job's straggler as the collector has it now; fails while none is active."""
    found = httpx.get(f"{collector}/api/v1/stragglers", timeout=10).json()
    staged = [s for s in found if s["job_id"] == TRAINING_JOB and s["ended_at"] is None]
    assert staged, found
    return dict(staged[0])


def _text(browser: Any, element_id: str) -> str:
    return str(browser.find_element("id", element_id).text)


def _utc(x: object) -> datetime:
    """A time on a figure's axis (UTC, written without its zone)."""
    return datetime.fromisoformat(str(x)).replace(tzinfo=UTC)


def test_sigint_stops_everything(demo: Demo) -> None:
    data_dir = Path(demo.address(r"data\s+(\S+) \(temporary\)"))
    demo.process.send_signal(signal.SIGINT)
    rest, _ = demo.process.communicate(timeout=60)
    assert demo.process.returncode == 0, demo.output + rest
    assert "stopped." in rest
    assert postmaster_pids(data_dir) == [], "no process may outlive the demo"
    assert not data_dir.exists(), "the temporary data directory is removed"
