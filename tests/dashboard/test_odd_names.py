"""Names with URL syntax in them, clicked through in real headless Chromium. Exporters name racks,
nodes and jobs with any printable characters; a node called `rack/1 node#2?x%` in a rack called `r/1`
must still open its own page from a heatmap click, its name one percent-encoded path segment that the
node page decodes, and a job called the same way from the jobs list. The names go in through a real
collector, as an exporter would send them."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest

from gpuscope.bench.browser import console_errors, graph_data, open_page, screenshot, wait_until
from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.dashboard.figures import plain, unplain
from gpuscope.dashboard.grid import Grid, GridRow
from gpuscope.dashboard.pages.heatmap import click_targets, row_target
from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, JobInfo, Snapshot
from gpuscope.exporter.wire import Origin
from tests.collector.helpers import push_binary
from tests.dashboard.helpers import dashboard_over_collector
from tests.processes import RunningCollector

RACK, NODE, JOB = "r/1", "rack/1 node#2?x% ünï", "train/1 #2?x% ünï"
DECOY = ("r2", "plain")  # another rack's node, one GPU: a click that opens the wrong node shows it
GPUS = {NODE: 3, DECOY[1]: 1}


@pytest.fixture(scope="module")
def dashboard(postgres: EmbeddedPostgres) -> Iterator[str]:
    with dashboard_over_collector(postgres, _load) as url:
        yield url


def _load(collector: RunningCollector) -> None:
    now = time.time()
    for rack, node in ((RACK, NODE), DECOY):
        origin = Origin("c", rack, node, "sim", str(uuid.uuid4()))
        gpus = [GpuIdentity(i, f"GPU-{uuid.uuid4()}", "H100", f"00:{i:02x}") for i in range(GPUS[node])]
        jobs = {g.index: JobInfo(JOB, "ada") for g in gpus} if node == NODE else {}
        snapshots = [
            Snapshot(
                ts=now - 300 + 10 * t,
                gpus=tuple(GpuReading(g, True, {"util_pct": 50.0 + g.index, "power_w": 400.0}) for g in gpus),
                ports=(),
                jobs=jobs,
            )
            for t in range(30)
        ]
        push_binary(collector, origin, 1, snapshots)


def click_row(browser: Any, graph: str, row: int) -> None:
    """A real click on the middle of heatmap row `row`, counted from the top."""
    from selenium.webdriver.common.action_chains import ActionChains

    rows = len(graph_data(browser, graph)[0]["y"])
    layer = browser.find_element("css selector", f"#{graph} .nsewdrag")
    height = layer.rect["height"]
    ActionChains(browser).move_to_element_with_offset(
        layer, 0, round((row + 0.5) * height / rows - height / 2)
    ).click().perform()


def node_page(browser: Any, dashboard: str, query: str) -> None:
    """The node page for NODE: its address, its title and its own GPUs' data."""
    expected = f"{dashboard}/node/{quote(NODE, safe='')}{query}"
    wait_until(browser, lambda: browser.current_url == expected, 10, "navigation to the node")
    gpu = dict(part.split("=") for part in query.lstrip("?").split("&")).get("gpu")
    title = f"Node {NODE}" + (f", GPU {gpu}" if gpu else "")
    wait_until(browser, lambda: browser.find_element("id", "node-title").text == title, 10, "the node's title")
    wait_until(browser, lambda: graph_data(browser, "node-series"), 10, "the node's series")
    names = {trace["name"] for trace in graph_data(browser, "node-series")}
    assert names == ({f"gpu{gpu}"} if gpu else {"gpu0", "gpu1", "gpu2"}), "NODE's GPUs, not the decoy's one"
    assert "No node" not in browser.find_element("id", "page").text


def test_a_heatmap_click_opens_a_node_named_with_url_syntax(dashboard: str, browser: Any) -> None:
    open_page(browser, dashboard + "/heatmap?metric=util_pct&range=15m&level=gpu")
    labels = graph_data(browser, "heatmap-graph")[0]["y"]  # bottom-up
    assert labels[::-1] == [f"{RACK}/{NODE}/gpu{i}" for i in range(3)] + ["r2/plain/gpu0"]
    click_row(browser, "heatmap-graph", 1)
    node_page(browser, dashboard, "?gpu=1&range=15m")
    screenshot(browser, "odd-names-node")
    # Back, and by node rows this time: the node without a GPU.
    open_page(browser, dashboard + "/heatmap?metric=util_pct&range=15m&level=node")
    click_row(browser, "heatmap-graph", 0)
    node_page(browser, dashboard, "?range=15m")
    # The address, shared: opened directly, the same page.
    open_page(browser, f"{dashboard}/node/{quote(NODE, safe='')}?gpu=2")
    assert browser.find_element("id", "node-title").text == f"Node {NODE}, GPU 2"
    assert console_errors(browser) == []


def test_a_job_named_with_url_syntax_opens_from_the_jobs_list(dashboard: str, browser: Any) -> None:
    open_page(browser, dashboard + "/jobs?range=1h")
    link = browser.find_element("link text", JOB)
    assert link.get_attribute("href") == f"{dashboard}/jobs/{quote(JOB, safe='')}"
    link.click()
    wait_until(browser, lambda: browser.find_element("id", "job-title").text == f"Job {JOB}", 10, "the job's page")
    wait_until(browser, lambda: "user ada" in browser.find_element("id", "job-summary").text, 10, "the job's data")
    assert console_errors(browser) == []


def test_click_targets_find_the_node_in_any_label() -> None:
    """Without a browser: every row's node comes back from its label, whatever the names hold."""
    names = [("r/1", "a/b"), ("q", "1/a/b"), ("<&>", "%{y}/gpu3"), ("", "ü#?%"), ("x", "x"), ("/" * 128, "/" * 128)]
    rows = [GridRow(f"{rack}/{node}/gpu{g}", f"c/{rack}", node, g, 1) for rack, node in names for g in (0, 12)]
    rows += [GridRow(f"{rack}/{node}", f"c/{rack}", node, None, 1) for rack, node in names]
    rows.append(GridRow("r/1", "c/r/1", None, None, 4))  # a rack row opens nothing
    targets = click_targets(Grid("util_pct", 60, "gpu", rows, [], np.empty((len(rows), 0))))
    for row in rows:
        # A click reports the label as the figure shows it (escaped); the page unescapes it first.
        found = row_target(unplain(plain(row.label)), targets)
        assert found == ((row.node, row.gpu) if row.node is not None else None), row.label
    assert row_target("r/1/a/b/gpu7", targets) is None, "a row the page no longer shows"
    # The click sends the map back: a few dozen bytes a row, however long the names.
    assert len(json.dumps(targets)) < 50 * len(rows)
