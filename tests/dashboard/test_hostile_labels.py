"""Hostile names in real headless Chromium. Plotly renders a subset of HTML in every string of a figure
(tick labels, legend names, annotations, titles, hover text: `<a href>` becomes a link, `<b>` bold) and
fills `%{...}` in hover templates. A rack, node, port, job, user or silence named with HTML or template
syntax must show literally on every page and never become a link or markup. The names go in through a
real collector, as an exporter on a compromised node would send them (anything printable is valid)."""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import httpx
import numpy as np
import pytest

from gpuscope.bench.browser import console_errors, graph_data, open_page, plotly_hover, screenshot, wait_until
from gpuscope.collector.query import GpuRow, Heatmap, NicSeries, PortRow, RackPower, Series
from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.dashboard.figures import (
    Mark,
    budget_figure,
    heatmap_figure,
    message_figure,
    nic_figure,
    plain,
    rack_power_figure,
    series_figure,
    unplain,
)
from gpuscope.dashboard.grid import to_grid
from gpuscope.dashboard.pages.heatmap import click_targets, row_target
from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, JobInfo, PortIdentity, PortReading, Snapshot
from gpuscope.exporter.wire import Origin
from tests.collector.helpers import push_binary
from tests.dashboard.helpers import dashboard_over_collector
from tests.processes import RunningCollector

LINK = '<a href="https://evil.example/">x</a>'
BOLD = "<b>bold</b>"
TEMPLATE = "ops%{y}"  # Plotly would fill this in a hover template
GONE = '<a href="https://evil.example/">gone</a>'  # a node that does not exist, named in the URL


@dataclass(frozen=True)
class Named:
    cluster: str
    rack: str
    node: str
    device: str


NODES = (Named(TEMPLATE, LINK, BOLD, BOLD), Named("c", BOLD, LINK, LINK))
JOB_NODE = NODES[0]  # its GPUs run the job named LINK, for the user named BOLD

# Every link on the page, HTML or SVG (Plotly writes xlink:href), that leads to evil.example.
EVIL_LINKS_JS = """
const xlink = 'http://www.w3.org/1999/xlink';
return Array.from(document.getElementsByTagName('a'))
  .map(a => a.getAttribute('href') || a.getAttributeNS(xlink, 'href') || '')
  .filter(h => {
    try { return new URL(h, location.href).hostname.endsWith('evil.example'); } catch (e) { return false; }
  });
"""
# Markup Plotly or the page made of a name: <b> becomes a bold tspan in SVG, or a <b> element in HTML.
MARKUP_JS = """
return Array.from(document.querySelectorAll('#page b, #page tspan'))
  .filter(e => e.tagName.toLowerCase() === 'b' || /bold/.test(e.getAttribute('style') || ''))
  .map(e => e.textContent);
"""
SVG_TEXT_JS = """
return Array.from(document.querySelectorAll('#page .js-plotly-plot svg')).map(s => s.textContent).join('\\n');
"""


ADMIN = secrets.token_urlsafe(24)  # the collector's, for the silence the page shows


@pytest.fixture(scope="module")
def dashboard(postgres: EmbeddedPostgres) -> Iterator[str]:
    with dashboard_over_collector(postgres, _load, admin_token=ADMIN) as url:
        yield url


def _load(collector: RunningCollector) -> None:
    now = time.time()
    for named in NODES:
        origin = Origin(named.cluster, named.rack, named.node, "sim", str(uuid.uuid4()))
        gpus = [GpuIdentity(i, f"GPU-{uuid.uuid4()}", BOLD, f"00:{i:02x}") for i in range(2)]
        jobs = {g.index: JobInfo(LINK, BOLD) for g in gpus} if named is JOB_NODE else {}
        snapshots = [
            Snapshot(
                ts=now - 600 + 10 * t,
                gpus=tuple(
                    GpuReading(g, True, {"util_pct": 50.0 + g.index, "power_w": 400.0, "power_limit_w": 700.0})
                    for g in gpus
                ),
                ports=tuple(PortReading(PortIdentity(named.device, p), {"xmit_bytes": 1e9 * t}) for p in (1, 2)),
                jobs=jobs,
            )
            for t in range(60)
        ]
        push_binary(collector, origin, 1, snapshots)
    silence = {"matchers": [{"name": "node", "op": "=", "value": LINK}], "duration_s": 3600, "comment": BOLD,
               "created_by": LINK}  # fmt: skip
    created = httpx.post(
        f"{collector.url}/api/v1/silences", json=silence, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10
    )
    assert created.status_code == 201, created.text


def hover_label(browser: Any, graph: str, hover: Any) -> str:
    """The text of the hover label Plotly draws for `hover`, checked for links and markup."""
    shown: str = wait_until(browser, lambda: plotly_hover(browser, graph, hover), 10, f"hover on {graph}")
    assert browser.execute_script(EVIL_LINKS_JS) == [], f"{graph}: a name became a link in {shown!r}"
    assert browser.execute_script(MARKUP_JS) == [], f"{graph}: a name became markup in {shown!r}"
    return shown


def path(prefix: str, name: str, query: str = "") -> str:
    return f"{prefix}{quote(name, safe='')}{query}"


# Each page, and the names it must show literally: in its charts (SVG) and in its HTML.
PAGES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("/?range=15m", (f"{LINK}/{BOLD}/gpu0", f"{BOLD}/{LINK}/gpu1", f"{TEMPLATE}/{LINK}", f"c/{BOLD}"), ()),
    ("/heatmap?metric=util_pct&range=15m&level=node", (f"{LINK}/{BOLD}", f"{BOLD}/{LINK}"), ()),
    ("/heatmap?metric=util_pct&range=15m&level=rack", (LINK, BOLD), ()),
    ("/power?range=15m", (f"{TEMPLATE}/{LINK}", f"c/{BOLD}"), ()),
    ("/jobs?range=1h", (), (LINK, BOLD)),
    (path("/jobs/", LINK, "?metric=util_pct"), (f"{LINK}/{BOLD}/gpu1",), (f"Job {LINK}", f"user {BOLD}")),
    (path("/node/", LINK, "?range=15m"), (f"{LINK}/{LINK}:1",), (f"Node {LINK}",)),
    (path("/node/", BOLD, "?gpu=1&range=15m"), (f"{BOLD}/{BOLD}:1",), (f"Node {BOLD}, GPU 1",)),
    (path("/node/", GONE), (), (f"Node {GONE}", f"No node {GONE!r} in the telemetry")),
    ("/alerts", (), (f"node={LINK}", BOLD)),
)


def test_hostile_names_show_literally_and_never_as_links_or_markup(dashboard: str, browser: Any) -> None:
    for page, in_charts, in_html in PAGES:
        open_page(browser, dashboard + page)
        assert browser.execute_script(EVIL_LINKS_JS) == [], f"{page}: a name became a link"
        assert browser.execute_script(MARKUP_JS) == [], f"{page}: a name became markup"
        svg = browser.execute_script(SVG_TEXT_JS)
        text = browser.find_element("id", "page").text
        for name in in_charts:
            assert name in svg, f"{page}: {name!r} not shown literally in the charts"
        for name in in_html:
            assert name in text, f"{page}: {name!r} not shown literally"
        assert console_errors(browser) == [], page
    screenshot(browser, "hostile-names-alerts")
    # Hover labels too: a rack named "ops%{y}" in a hover template would show a number there instead.
    open_page(browser, dashboard + "/power?range=15m")
    watts = graph_data(browser, "power-stacked")[1]["y"]  # the second rack's line: ops%{y}/<a ...>
    newest = [{"curveNumber": 1, "pointNumber": max(i for i, kw in enumerate(watts) if kw is not None)}]
    assert f"{TEMPLATE}/{LINK}" in hover_label(browser, "power-stacked", newest)
    open_page(browser, dashboard + "/?range=15m")
    assert f"{BOLD}/{LINK}/gpu0" in hover_label(browser, "util-heatmap", {"xpx": 300, "ypx": 5})  # the top row
    # The job's link on /jobs is the dashboard's own page for that job, its id escaped in the path.
    open_page(browser, dashboard + "/jobs?range=1h")
    link = browser.find_element("link text", LINK)
    assert link.get_attribute("href") == dashboard + path("/jobs/", LINK)
    link.click()
    wait_until(browser, lambda: browser.find_element("id", "job-title").text == f"Job {LINK}", 10, "the job's page")


def test_no_figure_carries_a_name_as_markup_or_template() -> None:
    """Every string of every figure, without a browser: names escaped, none inside a hover template."""
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    times = [t0, t0 + timedelta(minutes=1)]
    gpus = [GpuRow(i, TEMPLATE, LINK, BOLD, i, f"GPU-{i}") for i in range(2)]
    ports = [PortRow(1, TEMPLATE, LINK, BOLD, LINK, 1), PortRow(2, TEMPLATE, LINK, BOLD, BOLD, 1)]
    values = np.ones((2, 2))
    figures = [
        heatmap_figure(to_grid(Heatmap("util_pct", 60, gpus, times, values), level), "r", [Mark(0, LINK)])
        for level in ("gpu", "node", "rack")
    ] + [
        heatmap_figure(to_grid(Heatmap(TEMPLATE, 60, gpus, times, values), "gpu"), "r"),  # an unknown metric
        rack_power_figure(RackPower(60, [f"{TEMPLATE}/{LINK}", BOLD], times, values), "r"),
        budget_figure([f"{TEMPLATE}/{LINK}", BOLD], [1.0, 2.0], [1.5, None]),
        series_figure(Series(60, gpus, times, {"util_pct": values, TEMPLATE: values}), ["util_pct", TEMPLATE], "r"),
        nic_figure(NicSeries("xmit_bytes", True, 60, ports, times, values), "r"),
        message_figure(f"No node {GONE!r}"),
    ]
    for figure in figures:
        strings = list(_strings(figure.to_plotly_json()))
        for text in strings:
            assert "<a" not in text and "<b>" not in text and "ops%{" not in text, text
    shown = {text for figure in figures for text in _strings(figure.to_plotly_json())}
    assert plain(f"{TEMPLATE}/{LINK}") in shown and plain(f"{LINK}/{BOLD}/gpu0") in shown
    assert plain(f"{TEMPLATE}/{LINK}") == 'ops%&#123;y}/&lt;a href="https://evil.example/"&gt;x&lt;/a&gt;'
    # A click on a heatmap row reports the escaped label; the page opens the node it names.
    grid = to_grid(
        Heatmap("util_pct", 60, [GpuRow(0, "c", "rack&1", "node<2>", 3, "GPU-0")], times[:1], values[:1, :1]), "gpu"
    )
    assert row_target(unplain(plain("rack&1/node<2>/gpu3")), click_targets(grid)) == ("node<2>", 3)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)
