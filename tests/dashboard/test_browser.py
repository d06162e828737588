"""The dashboard in real headless Chromium against a live stack on loopback: simulated exporters
pushing to a collector (with its alert engine), a simulated training job with an injected straggler
found by the real detector, and the dashboard reading the same database. Screenshots of every page go
to test-artifacts/dashboard/."""

from __future__ import annotations

import contextlib
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from gpuscope.bench.browser import console_errors, graph_data, open_page, plotly_in_use, screenshot, wait_until
from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.dashboard_process import DashboardSettings
from gpuscope.exporter.node_exporter import ExporterConfig, NodeExporter
from gpuscope.exporter.sim import JobSchedule, SimNodeSource, build_topology
from gpuscope.exporter.sim.training import Fault, simulate
from gpuscope.stragglers.watch import StragglerWatch
from tests.alerts.rules import gpu_over_temperature
from tests.conftest import new_database, require_tool
from tests.dashboard.helpers import running_dashboard
from tests.processes import running_collector
from tests.stragglers.helpers import HISTORY_S, JOB, push, watch
from tests.waiting import eventually

RULES = gpu_over_temperature()
PAGES = ("/", "/heatmap", "/power", "/jobs", "/jobs/train-1", "/node/node-001?gpu=3", "/alerts")


@dataclass(frozen=True)
class Stack:
    dashboard: str
    collector: str
    admin_token: str
    dsn: str
    gpus: int


@pytest.fixture(scope="module")
def stack(postgres: EmbeddedPostgres) -> Iterator[Stack]:
    require_tool("chromium")
    require_tool("chromedriver")
    dsn = new_database(postgres)
    token, admin = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    stack = contextlib.ExitStack()
    running = stack.enter_context(running_collector(dsn, token=token, admin_token=admin, rules=RULES, alert_tick_s=0.2))
    url = running.url
    # A training job whose GPU 2 on its second node runs hot and slows the job by 20%, still now.
    start = time.time() - HISTORY_S - 20
    fault = Fault("thermal", 1, 2, onset_s=1500.0, end_s=HISTORY_S + 3600, severity=0.2)
    push(running, simulate(JOB, [fault], HISTORY_S), start, "train-1")
    watch(dsn, StragglerWatch(), datetime.fromtimestamp(start + HISTORY_S + 20, UTC))
    topology = build_topology(4, 8, 2, cluster="live")
    exporters = [
        NodeExporter(
            SimNodeSource(node, JobSchedule(topology, 5), 5),
            ExporterConfig(
                node.cluster, node.rack, node.name, interval=0.5, push_url=url, token=token, push_interval=1.0
            ),
        )
        for node in topology
    ]
    exporters[1].source.fail_cooling(3, 60.0)  # type: ignore[attr-defined]
    for exporter in exporters:
        exporter.start()
    settings = DashboardSettings(db=dsn, listen="127.0.0.1:0", collector_url=url, refresh_ms=1500)
    dashboard = stack.enter_context(running_dashboard(settings))
    try:
        eventually(
            lambda: all(e.pusher and e.pusher.stats.snapshots_sent for e in exporters), what="every exporter to push"
        )
        eventually(
            lambda: httpx.get(f"{url}/api/v1/alerts", params={"state": "firing"}, timeout=5).json(),
            what="the hot GPU's alert to fire",
        )
        yield Stack(dashboard, url, admin, dsn, 32 + JOB.nodes * 4)
    finally:
        for exporter in exporters:
            exporter.stop()
        stack.close()


def test_every_page_loads_without_console_errors(stack: Stack, browser: Any) -> None:
    for path in PAGES:
        seconds = open_page(browser, stack.dashboard + path)
        name = path.strip("/").replace("/", "-").replace("?", "-").replace("=", "") or "overview"
        screenshot(browser, name)
        assert console_errors(browser) == [], path
        assert "Traceback" not in browser.page_source
        # Drawn by the partial Plotly bundle (dashboard/plotly_bundle.py), which knows every type drawn.
        plotly = plotly_in_use(browser)
        assert not plotly["full"], f"{path} fetched Dash's full plotly.js"
        assert set(plotly["drawn"]) <= set(plotly["known"]), (path, plotly["drawn"])
        print(f"{path}: rendered in {seconds:.2f} s, trace types {plotly['drawn']}")


def test_the_heatmap_shows_every_simulated_gpu_and_a_click_opens_its_node(stack: Stack, browser: Any) -> None:
    open_page(browser, stack.dashboard + "/heatmap?metric=util_pct&range=15m&level=gpu")
    (trace,) = graph_data(browser, "heatmap-graph")
    assert len(trace["y"]) == stack.gpus
    assert "rack-00/node-000/gpu0" in trace["y"]
    # A real click on the plot: Plotly reports the cell's row, the page opens that node (and GPU).
    from selenium.webdriver.common.action_chains import ActionChains

    layer = browser.find_element("css selector", "#heatmap-graph .nsewdrag")
    ActionChains(browser).move_to_element(layer).click().perform()
    wait_until(browser, lambda: "/node/" in browser.current_url, 10, "navigation to a node")
    clicked = browser.current_url.split("/node/", 1)[1]
    node, gpu = clicked.split("?")[0], clicked.split("gpu=")[1].split("&")[0]
    assert any(label.endswith(f"/{node}/gpu{gpu}") for label in trace["y"]) and clicked.endswith("&range=15m")
    title = wait_until(browser, lambda: browser.find_element("id", "node-title").text, 10, "node page")
    assert title == f"Node {node}, GPU {gpu}"
    screenshot(browser, "heatmap-click-to-node")


def test_filters_live_in_the_url_and_zoom_survives_refreshes(stack: Stack, browser: Any) -> None:
    open_page(browser, stack.dashboard + "/heatmap?metric=temp_c&range=15m&level=node")
    (trace,) = graph_data(browser, "heatmap-graph")
    assert len(trace["y"]) == 4 + JOB.nodes, "one row per node"
    title = browser.execute_script("return document.querySelector('#heatmap-graph .js-plotly-plot').layout.title.text")
    assert title.startswith("Temperature") and "per node" in title
    browser.find_element("css selector", "#heatmap-range input[value='1h']").click()
    wait_until(browser, lambda: "range=1h" in browser.current_url, 10, "the URL to follow the range")
    assert "metric=temp_c" in browser.current_url and "level=node" in browser.current_url
    open_page(browser, browser.current_url)  # the shared link restores the view
    assert browser.find_element("css selector", "#heatmap-range input[value='1h']").is_selected()
    # Refreshes update the same plot with the same uirevision, which is what makes Plotly keep the
    # user's zoom and pan (a drag-zoom through Selenium proved too unreliable to assert on).
    plot = "document.querySelector('#heatmap-graph .js-plotly-plot')"
    browser.execute_script(f"{plot}.__gpuscope_marker = 1")
    revision = browser.execute_script(f"return {plot}.layout.uirevision")
    updates = browser.execute_script(f"return {plot}.data[0].x.slice(-1)[0]")
    refreshed = f"return !{plot}.data[0].__gpuscope_stale"
    for refresh in ("first", "second"):  # two refreshes (every 1.5 s); each hands Plotly new traces
        browser.execute_script(f"{plot}.data[0].__gpuscope_stale = true")
        wait_until(browser, lambda: browser.execute_script(refreshed), 10, f"the {refresh} refresh")
    assert browser.execute_script(f"return {plot}.__gpuscope_marker") == 1, "the plot is updated, not rebuilt"
    assert browser.execute_script(f"return {plot}.layout.uirevision") == revision == "temp_c-1h-node"
    assert browser.execute_script(f"return {plot}.data[0].x.slice(-1)[0]") >= updates


def test_the_straggler_is_flagged_and_its_culprit_marked(stack: Stack, browser: Any) -> None:
    open_page(browser, stack.dashboard + "/jobs")
    flag = wait_until(browser, lambda: browser.find_element("css selector", ".straggler-flag"), 10, "straggler flag")
    assert "thermal" in flag.text and "train-1-n1 GPU 2" in flag.text
    screenshot(browser, "jobs-straggler-flag")
    open_page(browser, stack.dashboard + "/jobs/train-1")
    layout = browser.execute_script("return document.querySelector('#job-heatmap .js-plotly-plot').layout")
    (annotation,) = layout["annotations"]
    shown = re.fullmatch(r"straggler: thermal, ~(\d+)% slower \(now\)", annotation["text"])
    assert shown and 15 <= int(shown[1]) <= 25, annotation["text"]  # the job is 20% slower
    rows = graph_data(browser, "job-heatmap")[0]["y"]
    assert rows[round(annotation["y"])] == "r1/train-1-n1/gpu2", "the mark sits on the culprit's row"
    assert "thermal" in browser.find_element("id", "straggler-table").text
    screenshot(browser, "job-straggler-marked")


def test_a_silence_is_created_and_expired_from_the_alerts_page(stack: Stack, browser: Any) -> None:
    open_page(browser, stack.dashboard + "/alerts")
    wait_until(browser, lambda: "GpuOverTemperature" in browser.find_element("id", "alerts-active").text, 20, "alert")
    browser.find_element("id", "silence-matchers").send_keys("node=node-001, alertname=GpuOverTemperature")
    browser.find_element("id", "silence-comment").send_keys("fan swap")
    browser.find_element("id", "silence-author").send_keys("sre-on-call")  # who: never "dashboard"
    browser.find_element("id", "silence-token").send_keys("wrong-token-123456")
    browser.find_element("id", "silence-create").click()
    wait_until(browser, lambda: "HTTP 401" in browser.find_element("id", "silence-result").text, 10, "refusal")
    from selenium.webdriver.common.keys import Keys

    token = browser.find_element("id", "silence-token")
    token.send_keys(Keys.CONTROL, "a")  # as a user does: clear() bypasses the events React listens to
    token.send_keys(Keys.BACKSPACE, stack.admin_token)
    browser.find_element("id", "silence-create").click()
    wait_until(browser, lambda: "Created silence" in browser.find_element("id", "silence-result").text, 10, "creation")
    # Read within waits: the page re-renders the table on its refresh, and an element read between two
    # renders is stale (it failed CI once).
    def listed() -> bool:
        text = browser.find_element("id", "silences-table").text
        return "node=node-001" in text and "sre-on-call" in text  # who: never "dashboard"

    wait_until(browser, listed, 10, "listing with its author")
    wait_until(browser, lambda: "silenced by" in browser.find_element("id", "alerts-active").text, 10, "muted alert")
    screenshot(browser, "alerts-silenced")

    def expire() -> bool:
        browser.find_element("css selector", "#silences-table button").click()
        return True

    wait_until(browser, expire, 10, "the expire button")
    wait_until(browser, lambda: "Expired silence" in browser.find_element("id", "silence-result").text, 10, "expiry")
    wait_until(browser, lambda: "No active silences" in browser.find_element("id", "alerts-silences").text, 10, "gone")
    assert console_errors(browser) == []
