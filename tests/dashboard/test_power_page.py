"""The power page in real headless Chromium over a real collector: two racks that began reporting 40
minutes ago (a 6-hour chart shows the hours before as a gap, never as 0 kW), and a click from a rack to
the nodes and jobs drawing its power."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from selenium.webdriver.common.action_chains import ActionChains

from gpuscope.bench.browser import graph_data, open_page, screenshot, wait_until
from gpuscope.collector.query import RackPower
from gpuscope.collector.query.rack_power import NEAR_BUDGET
from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.dashboard.figures import budget_figure, rack_power_figure, reported_stretches
from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, JobInfo, Snapshot
from gpuscope.exporter.wire import Origin
from tests.collector.helpers import push_binary
from tests.dashboard.helpers import dashboard_over_collector
from tests.processes import RunningCollector

HISTORY_S, STEP_S = 2400, 30
RACKS = {"rack-1": ("pw-a1", "pw-a2"), "rack-2": ("pw-b1",), "rack-3": ("pw-c1",)}
WATTS = {"pw-a1": 600.0, "pw-a2": 300.0, "pw-b1": 100.0, "pw-c1": 650.0}  # per GPU of 700 W, 4 GPUs a node
JOB = ("train-9", "erin", "pw-a1")  # runs on pw-a1 only


@pytest.fixture(scope="module")
def dashboard(postgres: EmbeddedPostgres) -> Iterator[str]:
    with dashboard_over_collector(postgres, _load) as url:
        yield url


def _load(collector: RunningCollector) -> None:
    now = time.time()
    for rack, nodes in RACKS.items():
        for name in nodes:
            origin = Origin("pw", rack, name, "nvml", str(uuid.uuid4()))
            gpus = [GpuIdentity(i, f"GPU-{uuid.uuid4()}", "NVIDIA H100", f"00:{i:02x}") for i in range(4)]
            jobs = {g.index: JobInfo(JOB[0], JOB[1]) for g in gpus} if name == JOB[2] else {}
            values = {"util_pct": 50.0, "power_w": WATTS[name], "power_limit_w": 700.0}
            readings = tuple(GpuReading(g, True, values) for g in gpus)
            snapshots = [Snapshot(now + t, readings, (), jobs=jobs) for t in range(-HISTORY_S, 1, STEP_S)]
            for seq, first in enumerate(range(0, len(snapshots), 40)):
                push_binary(collector, origin, seq, snapshots[first : first + 40])


def test_hours_before_any_data_are_a_gap_never_zero(dashboard: str, browser: Any) -> None:
    opened = datetime.now(UTC).timestamp()
    open_page(browser, dashboard + "/power?range=6h")
    traces = wait_until(browser, lambda: graph_data(browser, "power-stacked"), 20, "the stacked chart")
    first_reading = opened - HISTORY_S - 120  # a bucket may start up to its width earlier
    for trace in traces:
        xs = [datetime.fromisoformat(x).replace(tzinfo=UTC).timestamp() for x in trace["x"]]
        assert min(xs) >= first_reading, f"{trace['name']} is drawn before any reading"
        assert all(y is not None and y > 0 for y in trace["y"]), "no point of a stack is drawn as 0 kW"
    axis = browser.execute_script("return document.querySelector('#power-stacked .js-plotly-plot').layout.xaxis.range")
    shown = [datetime.fromisoformat(x.replace(" ", "T")).replace(tzinfo=UTC).timestamp() for x in axis]
    assert shown[1] - shown[0] > 5 * 3600, "the axis still spans the range asked: the empty hours show as empty"
    screenshot(browser, "power-6h-gap")


def test_a_click_on_a_racks_bar_opens_its_nodes_and_jobs(dashboard: str, browser: Any) -> None:
    open_page(browser, dashboard + "/power?range=1h")
    bars = wait_until(
        browser, lambda: browser.find_elements("css selector", "#power-budget .bars .point path"), 20, "the bars"
    )
    (bar,) = [b for b, x in zip(bars, graph_data(browser, "power-budget")[0]["x"], strict=True) if x == "pw/rack-1"]
    ActionChains(browser).move_to_element(bar).click().perform()  # Plotly's drag layer takes the click
    wait_until(browser, lambda: "rack=pw%2Frack-1" in browser.current_url, 10, "the URL to name the rack")
    view = wait_until(browser, lambda: browser.find_element("id", "rack-view"), 10, "the rack's view")
    assert "range=1h" in browser.current_url, "the range stays"
    assert view.find_element("tag name", "h3").text.startswith("Rack pw/rack-1 now: 3.6 kW of its 5.6 kW budget")
    rows = [r.text for r in view.find_elements("css selector", "#rack-nodes tbody tr")]
    assert [r.split()[0] for r in rows] == ["pw-a1", "pw-a2"], "the hungriest node first"
    assert "2.40" in rows[0] and JOB[0] in rows[0] and rows[1].split()[-1] == "-"
    job_link = view.find_element("css selector", "#rack-jobs a")
    assert job_link.text == JOB[0] and job_link.get_attribute("href").endswith(f"/jobs/{JOB[0]}")
    node_link = view.find_element("css selector", "#rack-nodes a")
    assert node_link.get_attribute("href").endswith("/node/pw-a1")
    screenshot(browser, "power-rack-view")
    job_link.click()
    wait_until(browser, lambda: f"/jobs/{JOB[0]}" in browser.current_url, 10, "the job's page")


def test_the_overviews_rack_near_budget_opens_that_rack(dashboard: str, browser: Any) -> None:
    open_page(browser, dashboard + "/")
    link = wait_until(
        browser, lambda: browser.find_element("css selector", "#attention-list a[href*='rack']"), 20, "the rack's line"
    )
    assert link.text == "pw/rack-3" and link.get_attribute("href").endswith("/power?rack=pw%2Frack-3")
    link.click()
    view = wait_until(browser, lambda: browser.find_element("id", "rack-view"), 10, "the rack's view")
    assert view.find_element("tag name", "h3").text.startswith("Rack pw/rack-3 now: 2.6 kW of its 2.8 kW budget (93%)")


def test_an_unknown_rack_says_so(dashboard: str, browser: Any) -> None:
    open_page(browser, dashboard + "/power?rack=pw/rack-99")
    text = wait_until(browser, lambda: browser.find_element("id", "power-rack").text, 10, "the rack's view")
    assert "No rack pw/rack-99" in text


def test_near_budget_is_one_threshold() -> None:
    """The bar turns orange where the overview calls a rack near its budget, and red over it."""
    near, below = 10.0 * NEAR_BUDGET, 10.0 * NEAR_BUDGET - 0.01
    (bars, _) = budget_figure(["a", "b", "c"], [below, near, 10.01], [10.0, 10.0, 10.0]).data
    blue, orange, red = bars.marker.color
    assert len({blue, orange, red}) == 3 and red == "#d32f2f"


def test_stretches_split_at_the_longest_gaps_only() -> None:
    reported = np.array([0, 0, 1, 1, 0, 1, 0, 0, 0, 1, 1], bool)
    assert [s.tolist() for s in reported_stretches(reported, 8)] == [[2, 3], [5], [9, 10]]
    assert [s.tolist() for s in reported_stretches(reported, 2)] == [[2, 3, 5], [9, 10]]
    assert [s.tolist() for s in reported_stretches(reported, 1)] == [[2, 3, 5, 9, 10]]
    assert reported_stretches(np.zeros(3, bool), 3) == []


def test_a_rack_keeps_its_colour_and_legend_entry_across_gaps() -> None:
    t0 = datetime(2026, 11, 1, tzinfo=UTC).timestamp()
    times = [datetime.fromtimestamp(t0 + 60 * k, UTC) for k in range(5)]
    watts = np.array([[np.nan, 100.0, np.nan, 300.0, 400.0], [np.nan, 10.0, np.nan, np.nan, 40.0]])
    figure = rack_power_figure(RackPower(60, ["c/r1", "c/r2"], times, watts), "6h")
    assert [(t.name, t.showlegend, t.stackgroup) for t in figure.data] == [
        ("c/r1", True, "stretch-0"),
        ("c/r2", True, "stretch-0"),
        ("c/r1", False, "stretch-1"),
        ("c/r2", False, "stretch-1"),
    ]
    assert figure.data[0].line.color == figure.data[2].line.color != figure.data[1].line.color
    assert list(figure.data[2].y) == [0.3, 0.4] and list(figure.data[3].y) == [None, 0.04]
