"""The node, job and jobs pages in real headless Chromium over the busy little cluster (busy_cluster.py) and
two more nodes: a node's charts give each GPU one colour, a job's page says one GPU-hours figure and marks
its straggler from its onset, links land on the GPU or the filtered list they name, a job holding idle
GPUs is flagged on the jobs list and on its node's page, and an unknown job or node gets one message.
The idle tests come first: eval-3's idle GPUs count as idle while their newest sample is fresh."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from gpuscope.alerts.rules import default_rules_text, parse_rules
from gpuscope.bench.browser import console_errors, open_page, wait_until
from gpuscope.collector import query
from gpuscope.collector.query.idle_gpus import IDLE_FOR
from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.dashboard_process import DashboardSettings
from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, JobInfo, Snapshot
from gpuscope.exporter.wire import Origin
from gpuscope.stragglers.reads import stragglers
from tests.collector.helpers import push_binary
from tests.conftest import new_database, require_tool
from tests.dashboard import busy_cluster
from tests.dashboard.helpers import jobs_table, running_dashboard
from tests.processes import RunningCollector, running_collector

WIDE = ("gpu-w01", 64)  # wide-9's node and GPUs: its GPU-hours grow by 0.1 every 5.6 s
NVLINK = "nv-01"  # four GPUs, GPU 0 without NVLink counters


@dataclass(frozen=True)
class Pages:
    url: str  # refreshing every minute
    fast: str  # the same dashboard refreshing every 2 s
    dsn: str


@pytest.fixture(scope="module")
def pages(postgres: EmbeddedPostgres) -> Iterator[Pages]:
    require_tool("chromium")
    require_tool("chromedriver")
    dsn = new_database(postgres)
    with running_collector(dsn) as collector:
        busy_cluster.load(collector)
        _push_wide_job(collector, time.time())
        _push_nvlink_node(collector, time.time())
        busy_cluster.roll_up(dsn)  # wide-9's minutes too: its idle share is measured
        settings = DashboardSettings(db=dsn, listen="127.0.0.1:0", collector_url=collector.url, refresh_ms=60_000)
        fast = DashboardSettings(**{**settings.__dict__, "refresh_ms": 2000})
        with running_dashboard(settings) as url, running_dashboard(fast) as fast_url:
            yield Pages(url, fast_url, dsn)


def _push_wide_job(collector: RunningCollector, now: float) -> None:
    """wide-9 (erin): 64 GPUs of one node for the last 10 minutes."""
    origin = Origin("c", "r4", WIDE[0], "nvml", str(uuid.uuid4()))
    gpus = [GpuIdentity(i, f"GPU-{uuid.uuid4()}", "H100", f"00:{i:02x}") for i in range(WIDE[1])]
    snapshots = [
        Snapshot(
            ts=now - 600 + t,
            gpus=tuple(GpuReading(g, True, {"util_pct": 60.0, "temp_c": 60.0}) for g in gpus),
            ports=(),
            jobs={g.index: JobInfo("wide-9", "erin") for g in gpus},
        )
        for t in range(0, 600, 30)
    ]
    push_binary(collector, origin, 1, snapshots)


def _push_nvlink_node(collector: RunningCollector, now: float) -> None:
    """nv-01: four GPUs for the last 10 minutes, each busy at its own level; GPUs 1-3 count NVLink bytes."""
    origin = Origin("c", "r4", NVLINK, "nvml", str(uuid.uuid4()))
    gpus = [GpuIdentity(i, f"GPU-{uuid.uuid4()}", "H100", f"00:{i:02x}") for i in range(4)]
    snapshots = []
    for t in range(0, 600, 10):
        readings = []
        for g in gpus:
            values = {"util_pct": 20.0 * g.index, "sm_active_pct": 15.0 * g.index, "temp_c": 50.0 + g.index}
            if g.index:
                values |= {"nvlink_tx_bytes": 1e10 * g.index * t, "nvlink_rx_bytes": 1e10 * g.index * t}
            readings.append(GpuReading(g, True, values))
        snapshots.append(Snapshot(ts=now - 600 + t, gpus=tuple(readings), ports=()))
    push_binary(collector, origin, 1, snapshots)


# A job holding idle GPUs (item 3)


def test_the_jobs_list_flags_a_job_holding_idle_gpus_and_filters_by_it(pages: Pages, browser: Any) -> None:
    open_page(browser, pages.url + "/jobs?range=1h")
    shown = jobs_table(browser)
    idle = shown["eval-3"]["idle GPUs"]
    assert idle.text == "⚠ 2 of 4 idle", "eval-3's GPUs 2 and 3 did nothing for 30 minutes"
    title = idle.find_element("css selector", ".idle-flag").get_attribute("title")
    assert "gpu-b01 GPU 2, gpu-b01 GPU 3: under 5% utilisation for 30 minutes and more" in title
    assert shown["train-7"]["idle GPUs"].text == "none"
    assert (
        shown["prep-12"]["idle GPUs"]
        .find_element("css selector", ".gap")
        .get_attribute("title")
        .startswith("it has ended")
    )
    young = shown["notebook-1"]["idle GPUs"].find_element("css selector", ".gap").get_attribute("title")
    assert young.startswith("not judged yet: a GPU counts as idle after 30 minutes"), young
    browser.find_element("css selector", "#jobs-flags input[value='idle']").click()
    wait_until(browser, lambda: "idle=1" in browser.current_url, 10, "the idle filter in the URL")
    wait_until(browser, lambda: set(jobs_table(browser)) == {"eval-3"}, 10, "only the job holding idle GPUs")
    open_page(browser, pages.url + "/jobs?range=1h&idle=1")  # the address the overview links to
    assert set(jobs_table(browser)) == {"eval-3"}
    assert browser.find_element("css selector", "#jobs-flags input[value='idle']").is_selected()
    assert console_errors(browser) == []


def test_the_node_page_says_a_job_holds_its_gpus_idle_with_a_link_to_it(pages: Pages, browser: Any) -> None:
    open_page(browser, pages.url + "/node/gpu-b01")
    findings = browser.find_element("id", "node-findings").text
    assert "Nothing needs an operator" not in findings
    boxes = browser.find_elements("css selector", "#node-findings-list .findings-of")
    (idle,) = [box for box in boxes if box.find_element("tag name", "strong").text == "GPUs 2, 3"]
    assert "held idle by job eval-3 (bob): under 5% utilisation for 30 minutes and more since" in idle.text
    assert "release them" in idle.text
    link = idle.find_element("css selector", ".finding-job")
    assert link.text == "job eval-3" and link.get_attribute("href") == f"{pages.url}/jobs/eval-3"
    assert console_errors(browser) == []


def test_idle_is_the_shipped_gpu_idle_in_job_rules_test() -> None:
    rules = {rule.alert: rule for group in parse_rules(default_rules_text()) for rule in group.rules}
    assert f"util_pct < {query.IDLE_BELOW_PCT:g}" in rules["GpuIdleInJob"].expr
    assert rules["GpuIdleInJob"].for_s == IDLE_FOR.total_seconds()


# Links that land where they say (item 13)


def test_a_straggling_gpus_link_opens_the_node_page_on_that_gpu(pages: Pages, browser: Any) -> None:
    node, gpu = busy_cluster.HOT
    open_page(browser, pages.url + "/jobs?range=1h")
    flag = jobs_table(browser)["train-7"]["straggler"].find_element("css selector", "a.straggler-flag")
    assert flag.get_attribute("href") == f"{pages.url}/node/{node}?gpu={gpu}"
    flag.click()
    wait_until(browser, lambda: browser.find_element("id", "node-title").text == f"Node {node}, GPU {gpu}", 10)
    wait_until(browser, lambda: _trace_names(browser, "node-series") == {f"gpu{gpu}"}, 10, "GPU 2's lines only")
    browser.find_element("id", "node-all-gpus").click()
    wait_until(browser, lambda: browser.find_element("id", "node-title").text == f"Node {node}", 10, "all GPUs")
    wait_until(browser, lambda: _trace_names(browser, "node-series") == {f"gpu{i}" for i in range(4)}, 10, "all")
    open_page(browser, f"{pages.url}/node/{node}?gpu=7")
    status = browser.find_element("id", "node-status").text
    assert status == f"No GPU '7' on node '{node}': its GPUs are numbered from 0 (see all of them above)."
    open_page(browser, pages.url + "/jobs/train-7")
    table = browser.find_element("id", "straggler-table")
    assert table.find_element("link text", f"GPU {gpu}").get_attribute("href") == f"{pages.url}/node/{node}?gpu={gpu}"
    assert console_errors(browser) == []


def test_the_jobs_list_filters_to_jobs_with_a_straggler(pages: Pages, browser: Any) -> None:
    open_page(browser, pages.url + "/jobs?range=1h&straggler=1")  # the address the stragglers card opens
    assert set(jobs_table(browser)) == {"train-7"}
    box = browser.find_element("css selector", "#jobs-flags input[value='straggler']")
    assert box.is_selected()
    box.click()
    wait_until(browser, lambda: "straggler=1" not in browser.current_url, 10, "the filter off")
    wait_until(browser, lambda: len(jobs_table(browser)) > 1, 10, "every job again")
    assert console_errors(browser) == []


def test_an_unknown_job_or_node_gets_one_message_and_the_way_back(pages: Pages, browser: Any) -> None:
    for path, message, back in (
        ("/jobs/999999", "No job '999999' in the telemetry", "/jobs"),
        ("/node/node-999", "No node 'node-999' in the telemetry", "/"),
    ):
        open_page(browser, pages.url + path)
        page = browser.find_element("id", "page")
        assert message in page.text, page.text
        assert not page.find_elements("css selector", ".js-plotly-plot, table"), "no empty charts or tables"
        assert browser.find_element("id", "back-link").get_attribute("href") == pages.url + back
    browser.find_element("id", "back-link").click()
    wait_until(browser, lambda: browser.current_url == pages.url + "/", 10, "the way back")
    assert console_errors(browser) == []


# One colour per GPU on a node's page (item 2)


def test_each_gpu_keeps_one_colour_on_every_chart_of_the_node_page(pages: Pages, browser: Any) -> None:
    open_page(browser, f"{pages.url}/node/{NVLINK}")
    colours: dict[str, set[str]] = {}
    for graph in ("node-series", "node-nvlink-graph"):
        for name, colour in _colours(browser, graph):
            colours.setdefault(name, set()).add(colour)
    assert set(colours) == {f"gpu{i}" for i in range(4)}
    assert all(len(seen) == 1 for seen in colours.values()), colours
    assert len({next(iter(seen)) for seen in colours.values()}) == 4, "four GPUs, four colours"
    nvlink = {name for name, _ in _colours(browser, "node-nvlink-graph")}
    assert nvlink == {"gpu1", "gpu2", "gpu3"}, "GPU 0 reports no NVLink: the others keep their colours"
    open_page(browser, f"{pages.url}/node/{NVLINK}?gpu=2")
    assert {colour for _, colour in _colours(browser, "node-series")} == colours["gpu2"], "GPU 2 alone, same colour"
    assert console_errors(browser) == []


# The job page (item 12)


def test_the_straggler_is_outlined_from_its_onset_not_over_the_whole_job(pages: Pages, browser: Any) -> None:
    with psycopg.connect(pages.dsn) as conn:
        job = query.job(conn, "train-7")
        assert job is not None
        (straggler,) = stragglers(conn, query.TimeRange(job.started_at, job.last_seen), job="train-7")
    open_page(browser, pages.url + "/jobs/train-7")
    layout = browser.execute_script("return document.querySelector('#job-heatmap .js-plotly-plot').layout")
    xs = browser.execute_script("return document.querySelector('#job-heatmap .js-plotly-plot').data[0].x")
    (box,) = [s for s in layout["shapes"] if s["type"] == "rect"]
    assert box["xref"] == "x", "in time, not across the whole plot"
    x0, first, last = (_when(t) for t in (box["x0"], xs[0], xs[-1]))
    bucket = _when(xs[1]) - first
    assert first + bucket < x0, "after the job's first cells: the straggler began 25 minutes in"
    assert abs(x0 + bucket / 2 - straggler.started_at) <= bucket, (x0, straggler.started_at)
    assert _when(box["x1"]) == last + bucket / 2, "to now: it is still straggling"
    assert console_errors(browser) == []


def test_a_job_page_says_one_gpu_hours_figure_everywhere(pages: Pages, browser: Any) -> None:
    """The header refreshes every 2 s here, the summary every minute; wide-9 gains 0.1 GPU-hours every
    5.6 s: two figures computed apart would part within seconds."""
    open_page(browser, pages.fast + "/jobs/wide-9")
    seen = set()
    for _ in range(12):
        said = re.search(r" · ([\d.]+) GPU-hours$", browser.find_element("id", "job-summary").text)
        assert said, browser.find_element("id", "job-summary").text
        header = said[1]
        tile = browser.find_element("css selector", "#job-tile-gpu-hours .tile-value").text
        verdict = browser.find_element("id", "job-verdict").text
        assert header == tile and f": {tile} GPU-hours." in verdict, (header, tile, verdict)
        seen.add(header)
        time.sleep(1)
    assert len(seen) == 1, "one read, one figure, until the summary's next minute"
    idle = browser.find_element("css selector", "#job-tile-idle .idle-measured")
    assert " GPU-hours measured were under 5% utilisation" in idle.text
    assert f"Of the {header} GPU-hours held, the rest is the newest minutes" in idle.get_attribute("title")
    assert console_errors(browser) == []


def test_each_gpu_of_a_job_shows_its_temperature_and_clock(pages: Pages, browser: Any) -> None:
    open_page(browser, pages.url + "/jobs/train-7")
    table = browser.find_element("id", "job-gpus-table")
    headers = [th.text for th in table.find_elements("css selector", "thead th")]
    assert headers[-2:] == ["temperature, mean / max (°C)", "SM clock, mean (MHz)"]
    rows = {}
    for tr in table.find_elements("css selector", "tbody tr"):
        cells = [td.text for td in tr.find_elements("tag name", "td")]
        mean, hottest = (float(v) for v in cells[-2].split(" / "))
        rows[(cells[0], cells[1])] = (mean, hottest, float(cells[-1]))
    assert len(rows) == 8 and all(mean <= hottest for mean, hottest, _ in rows.values())
    hot = (busy_cluster.HOT[0], f"GPU {busy_cluster.HOT[1]}")
    assert max(rows, key=lambda r: rows[r][1]) == hot and rows[hot][1] >= 85, rows
    assert min(rows, key=lambda r: rows[r][2]) == hot, "held down by heat: the slowest clock"
    assert console_errors(browser) == []


def _when(text: str) -> datetime:
    """A time as Plotly holds it ('2026-11-01 08:00:07.5', its own, or ISO with the offset sent), in UTC."""
    parsed = datetime.fromisoformat(text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _trace_names(browser: Any, graph: str) -> set[str]:
    return {name for name, _ in _colours(browser, graph)}


def _colours(browser: Any, graph: str) -> list[tuple[str, str]]:
    """Each line Plotly drew in a graph, by name, with the colour it drew it in."""
    return [
        (name, colour)
        for name, colour in browser.execute_script(
            "return document.querySelector('#' + arguments[0] + ' .js-plotly-plot')._fullData"
            ".map(t => [t.name, t.line.color]);",
            graph,
        )
    ]
