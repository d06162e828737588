"""The jobs list and a job's page in real headless Chromium, over a busy little cluster (busy_cluster.py):
the list sorts and filters with its state in the URL, every "-" says why, and a job's page sums up its
efficiency in numbers and words, with links to its nodes and GPUs. Pure parts (the view in the URL, the
reasons for a "-") are tested without a browser at the end."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from selenium.webdriver.common.action_chains import ActionChains

from gpuscope.bench.browser import console_errors, open_page, plotly_hover, screenshot, wait_until
from gpuscope.collector import query
from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.dashboard import job_gaps
from gpuscope.dashboard.job_view import JobsView, order, pick
from gpuscope.dashboard.pages.job import evidence_words
from gpuscope.dashboard_process import DashboardSettings
from tests.conftest import new_database, require_tool
from tests.dashboard import busy_cluster
from tests.dashboard.helpers import jobs_table, running_dashboard
from tests.processes import running_collector

ALL_JOBS = {"train-7", "eval-3", "prep-12", "notebook-1", "research/llama"}


@dataclass(frozen=True)
class Cluster:
    url: str
    dsn: str
    loaded: busy_cluster.Loaded


@pytest.fixture(scope="module")
def cluster(postgres: EmbeddedPostgres) -> Iterator[Cluster]:
    require_tool("chromium")
    require_tool("chromedriver")
    dsn = new_database(postgres)
    with running_collector(dsn) as collector:
        loaded = busy_cluster.load(collector)
        settings = DashboardSettings(db=dsn, listen="127.0.0.1:0", collector_url=collector.url, refresh_ms=60_000)
        with running_dashboard(settings) as url:
            yield Cluster(url, dsn, loaded)


def job_order(browser: Any) -> list[str]:
    table = browser.find_element("id", "jobs")
    return [tr.find_element("css selector", "td").text for tr in table.find_elements("css selector", "tbody tr")]


def gap_reason(cell: Any) -> str:
    """The reason a "-" cell gives on hover (and fails the test if the cell is not an explained "-")."""
    assert cell.text == "-", cell.text
    return str(cell.find_element("css selector", ".gap").get_attribute("title"))


def test_every_dash_on_the_jobs_list_says_why(cluster: Cluster, browser: Any) -> None:
    open_page(browser, cluster.url + "/jobs?range=1h")
    table = browser.find_element("id", "jobs")
    headers = [th.text for th in table.find_elements("css selector", "th")]
    assert headers == [
        "job", "user", "namespace", "workload", "state", "nodes", "GPUs", "GPU-hours", "util (%)",
        "SM active (%)", "tensor active (%)", "started (UTC)", "straggler", "idle GPUs",
    ]  # fmt: skip
    found = jobs_table(browser)
    assert set(found) == ALL_JOBS
    assert gap_reason(found["research/llama"]["user"]) == job_gaps.NO_USER_KUBERNETES
    assert gap_reason(found["train-7"]["namespace"]) == job_gaps.NOT_KUBERNETES
    assert gap_reason(found["eval-3"]["SM active (%)"]) == job_gaps.NOT_REPORTED, "an A100 reports no SM activity"
    assert found["eval-3"]["util (%)"].text == "42", "two busy GPUs at 85%, two idle"
    assert gap_reason(found["notebook-1"]["util (%)"]) == job_gaps.TOO_RECENT
    assert gap_reason(found["prep-12"]["straggler"]) == job_gaps.ONE_GPU
    assert found["prep-12"]["state"].text.startswith("ended ")
    assert "thermal" in found["train-7"]["straggler"].text and "gpu-a02 GPU 2" in found["train-7"]["straggler"].text
    legend = browser.find_element("id", "jobs-legend").text
    for reason in (job_gaps.NO_USER_KUBERNETES, job_gaps.NOT_REPORTED, job_gaps.TOO_RECENT, job_gaps.ONE_GPU):
        assert reason in legend
    every_dash = browser.find_elements("xpath", "//table[@id='jobs']//td[normalize-space(.)='-']")
    assert every_dash and all(d.find_elements("css selector", ".gap[title]") for d in every_dash)
    screenshot(browser, "jobs-list")
    assert console_errors(browser) == []


def test_headers_sort_and_the_order_is_in_the_url(cluster: Cluster, browser: Any) -> None:
    open_page(browser, cluster.url + "/jobs?range=1h")
    browser.find_element("link text", "GPU-hours").click()
    wait_until(browser, lambda: "sort=-gpu_hours" in browser.current_url, 10, "the sort in the URL")
    wait_until(browser, lambda: job_order(browser)[:2] == ["train-7", "eval-3"], 10, "the largest first")
    hours = [float(jobs_table(browser)[job]["GPU-hours"].text) for job in job_order(browser)]
    assert hours == sorted(hours, reverse=True)
    assert "GPU-hours ▼" in browser.find_element("id", "jobs").text
    browser.find_element("link text", "GPU-hours ▼").click()
    wait_until(browser, lambda: "sort=gpu_hours" in browser.current_url, 10, "the other way round")
    wait_until(browser, lambda: job_order(browser)[-2:] == ["eval-3", "train-7"], 10, "the largest last")
    browser.find_element("link text", "SM active (%)").click()  # eval-3 has none: last, whichever the way
    wait_until(browser, lambda: "sort=-sm" in browser.current_url, 10, "sorting by SM activity")
    wait_until(browser, lambda: job_order(browser)[-2:] == ["eval-3", "notebook-1"], 10, "missing values last")
    assert console_errors(browser) == []


def test_filters_narrow_the_list_and_a_shared_address_restores_them(cluster: Cluster, browser: Any) -> None:
    from selenium.webdriver.common.keys import Keys

    open_page(browser, cluster.url + "/jobs?range=1h")
    browser.find_element("css selector", "#jobs-state input[value='running']").click()
    wait_until(browser, lambda: "state=running" in browser.current_url, 10, "the state in the URL")
    wait_until(browser, lambda: set(jobs_table(browser)) == ALL_JOBS - {"prep-12"}, 10, "ended jobs gone")
    browser.find_element("css selector", "#jobs-text").send_keys("LLAMA", Keys.ENTER)
    wait_until(browser, lambda: set(jobs_table(browser)) == {"research/llama"}, 10, "the job named llama")
    assert "q=LLAMA" in browser.current_url
    # A user's name filters by them: the list, the address and the dropdown follow.
    open_page(browser, cluster.url + "/jobs?range=1h")
    browser.find_element("link text", "bob").click()
    wait_until(browser, lambda: set(jobs_table(browser)) == {"eval-3"}, 10, "bob's jobs")
    assert "user=bob" in browser.current_url
    wait_until(browser, lambda: "bob" in browser.find_element("id", "jobs-user").text, 10, "the dropdown to follow")
    # The view, shared as an address, opens as it was.
    open_page(browser, cluster.url + "/jobs?user=alice&state=running&sort=-gpu_hours&range=1h")
    assert set(jobs_table(browser)) == {"train-7"}
    assert browser.find_element("css selector", "#jobs-state input[value='running']").is_selected()
    assert "alice" in browser.find_element("id", "jobs-user").text
    assert "GPU-hours ▼" in browser.find_element("id", "jobs").text
    open_page(browser, cluster.url + "/jobs?range=1h&q=nothing-like-this")
    assert "No jobs match these filters" in browser.find_element("id", "jobs-table").text
    browser.find_element("id", "jobs-clear").click()

    def all_shown() -> bool:
        return set(jobs_table(browser)) == ALL_JOBS - {"prep-12"} or len(jobs_table(browser)) >= 4

    wait_until(browser, all_shown, 10, "all")
    assert console_errors(browser) == []


def tile(browser: Any, key: str) -> str:
    return str(wait_until(browser, lambda: browser.find_element("id", f"job-tile-{key}").text, 10, f"the {key} tile"))


def test_a_job_page_sums_up_its_efficiency_and_links_its_nodes(cluster: Cluster, browser: Any) -> None:
    open_page(browser, cluster.url + "/jobs/train-7")
    with psycopg.connect(cluster.dsn) as conn:
        job = query.job(conn, "train-7")
    assert job is not None and job.usage.mean_tensor_active_pct is not None and job.usage.mean_sm_active_pct
    assert 20 < job.usage.mean_tensor_active_pct < 70
    assert tile(browser, "gpu-hours").startswith(f"{job.gpu_hours:.1f}\nGPU-hours\n8 GPUs for 0.")
    assert tile(browser, "tensor").startswith(f"{job.usage.mean_tensor_active_pct:.0f} %\ntensor active")
    assert tile(browser, "sm").startswith(f"{job.usage.mean_sm_active_pct:.0f} %\nSM active")
    assert tile(browser, "idle").startswith("0%\nidle while allocated"), "a synchronous job: no GPU sits idle"
    energy = re.match(r"([\d.]+) kWh\nenergy\nfrom the GPUs' energy counters", tile(browser, "energy"))
    assert energy and float(energy[1]) == pytest.approx(cluster.loaded.train_energy_kwh, abs=0.051)
    node, gpu, peak = busy_cluster.PEAK
    assert (
        tile(browser, "memory")
        == f"{peak / 2**30:.1f} GiB\npeak memory used\nof 80 GiB (89%) on {node} GPU {gpu}, in its last hour"
    )
    assert (
        browser.find_element("link text", f"{node} GPU {gpu}").get_attribute("href").endswith(f"/node/{node}?gpu={gpu}")
    )
    stragglers = tile(browser, "stragglers")
    shown = re.fullmatch(r"1 now\nstraggler now\ngpu-a02 GPU 2: thermal, ~(\d+)% slower", stragglers)
    assert shown and 15 <= int(shown[1]) <= 25, stragglers
    verdict = browser.find_element("id", "job-verdict").text
    assert (
        f"{job.gpu_hours:.1f} GPU-hours" in verdict and "kWh" in verdict and "Straggling now: gpu-a02 GPU 2" in verdict
    )
    # Where it ran: each node and each of its GPUs, one click from their pages.
    links = browser.find_elements("css selector", "#job-nodes a")
    hrefs = {a.text: a.get_attribute("href") for a in links if a.text.startswith("gpu-")}
    assert hrefs == {n: f"{cluster.url}/node/{n}" for n in busy_cluster.TRAIN_NODES}
    gpu_links = [a.get_attribute("href") for a in links if a.text.startswith("GPU ")]
    assert sorted(gpu_links) == sorted(
        f"{cluster.url}/node/{n}?gpu={g}" for n in busy_cluster.TRAIN_NODES for g in range(4)
    )
    table = browser.find_element("id", "job-gpus-table").text
    uuid = cluster.loaded.train_uuids[("gpu-a02", 2)]
    assert uuid[:12] + "…" in table and uuid not in table, "UUIDs shortened, whole on hover"
    screenshot(browser, "job-efficiency")
    assert console_errors(browser) == []
    browser.find_element("link text", "gpu-a02").click()
    wait_until(browser, lambda: browser.find_element("id", "node-title").text == "Node gpu-a02", 10, "the node page")


def test_hovers_give_the_value_its_unit_and_its_job(cluster: Cluster, browser: Any) -> None:
    open_page(browser, cluster.url + "/jobs/train-7")
    # A real pointer over the heatmap's middle (Plotly's drag layer covers the plot area).
    area = browser.find_element("css selector", "#job-heatmap .nsewdrag")
    ActionChains(browser).move_to_element(area).perform()
    cell = wait_until(
        browser, lambda: browser.execute_script("return document.querySelector('#job-heatmap .hoverlayer').textContent")
    )
    assert re.search(r"gpu\d.*\d+\.\d %job train-7 \(alice\)$", cell), cell
    # The node page's lines: notebook-1 took GPU 1 of gpu-b02 under a minute ago, no job held it before;
    # prep-12 left GPU 0 twenty minutes ago.
    open_page(browser, cluster.url + "/node/gpu-b02?range=15m")
    held = browser.execute_script("return document.querySelector('#node-series .js-plotly-plot').data[1].customdata")
    assert held[-1] == "job notebook-1 (dave)" and held[0] == "in no job", held
    first = plotly_hover(browser, "node-series", [{"curveNumber": 0, "pointNumber": 0}])
    assert first.startswith("gpu0") and "%" in first and first.endswith("in no job"), first


def test_an_idle_half_and_a_gpu_without_activity_counters_are_said_so(cluster: Cluster, browser: Any) -> None:
    open_page(browser, cluster.url + "/jobs/eval-3")
    assert tile(browser, "idle").startswith("50%\nidle while allocated\n"), "GPUs 2 and 3 did nothing"
    assert tile(browser, "tensor") == f"-\ntensor active\n{job_gaps.NOT_REPORTED}"
    energy = re.match(r"([\d.]+) kWh\nenergy\n≈ mean power times time, per minute", tile(browser, "energy"))
    # 2 GPUs at 330 W and 2 at 60 W for (at most) 30 minutes: under 0.39 kWh, most of it rolled up.
    assert energy and 0.25 <= float(energy[1]) <= 0.4, tile(browser, "energy")
    assert tile(browser, "memory").startswith("30.0 GiB\npeak memory used\nof 40 GiB (75%) on gpu-b01 GPU 0")
    assert tile(browser, "stragglers").startswith("none")
    open_page(browser, cluster.url + "/jobs/notebook-1")
    assert tile(browser, "tensor") == f"-\ntensor active\n{job_gaps.TOO_RECENT}"
    open_page(browser, cluster.url + "/jobs/" + quote("research/llama", safe=""))
    assert "namespace research · JobSet/llama" in browser.find_element("id", "job-summary").text
    assert console_errors(browser) == []


# Without a browser: the view in the URL, the order, the reasons.


def _job(job_id: str, gpu_hours: float, tensor: float | None, user: str | None = "u", **kw: Any) -> query.JobRow:
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    fields: dict[str, Any] = {
        "job_id": job_id, "user": user, "running": True, "started_at": t0, "ended_at": None, "last_seen": t0,
        "nodes": ["n1"], "gpus": 2, "gpu_hours": gpu_hours, "usage": query.Usage(50.0, 40.0, tensor, 300.0),
    }  # fmt: skip
    return query.JobRow(**(fields | kw))


def test_the_view_round_trips_through_the_url_and_sorting_toggles() -> None:
    view = JobsView.from_search("?state=running&range=6h&user=al%20ice&q=llama&sort=-gpu_hours")
    assert view == JobsView("running", "6h", "al ice", "", "llama", "-gpu_hours")
    assert JobsView.from_search(view.search()) == view
    assert JobsView.from_search("?state=finished").state == "ended", "addresses shared before still work"
    assert JobsView.from_search("?state=bogus&range=9y&sort=evil") == JobsView()
    assert view.sorted_by("gpu_hours").sort == "gpu_hours"
    assert view.sorted_by("job").sort == "job", "text: A to Z first"
    assert view.sorted_by("tensor").sort == "-tensor", "numbers: the largest first"


def test_order_puts_missing_values_last_and_text_matches_names() -> None:
    jobs = [_job("a", 1.0, 10.0), _job("b", 3.0, None), _job("c", 2.0, 30.0), _job("ns/llama", 0.5, 5.0)]
    assert [j.job_id for j in order(JobsView(sort="-tensor"), jobs, {})] == ["c", "a", "ns/llama", "b"]
    assert [j.job_id for j in order(JobsView(sort="tensor"), jobs, {})] == ["ns/llama", "a", "c", "b"]
    assert [j.job_id for j in order(JobsView(sort="-gpu_hours"), jobs, {})] == ["b", "c", "a", "ns/llama"]
    assert [j.job_id for j in order(JobsView(), jobs, {})] == ["a", "b", "c", "ns/llama"], "the store's order"
    assert [j.job_id for j in order(JobsView(sort="-straggler"), jobs, {"c": 0.2, "a": 0.1})] == [
        "c",
        "a",
        "b",
        "ns/llama",
    ]
    named = _job("4711", 1.0, 1.0, workload="JobSet/Llama-7", pods=["llama-7-w0"])
    assert pick(JobsView(text="llama"), [*jobs, named]) == [jobs[3], named]


def test_each_missing_mean_has_its_own_reason() -> None:
    now = datetime(2026, 11, 1, 1, tzinfo=UTC)
    nothing = query.Usage(None, None, None, None)
    assert job_gaps.why_no_usage(nothing, "util", now - timedelta(seconds=40), False, now) == job_gaps.TOO_RECENT
    assert job_gaps.why_no_usage(nothing, "util", now - timedelta(hours=2), False, now) == job_gaps.NO_SAMPLES
    assert job_gaps.why_no_usage(nothing, "util", now - timedelta(hours=2), True, now) == job_gaps.MIG_NO_UTIL
    some = query.Usage(80.0, None, None, 300.0)
    assert job_gaps.why_no_usage(some, "tensor", now - timedelta(hours=2), False, now) == job_gaps.NOT_REPORTED


def test_a_stragglers_evidence_reads_as_words() -> None:
    said = evidence_words({"job_slowdown": 0.186, "traffic_slowdown": 0.18, "share_rise": 0.2, "clock_ratio": 0.79})
    assert said == (
        "job 19% slower than its normal; its network traffic 18% slower, agreeing; this GPU's activity 20% over "
        "its share (it computes while the others wait); SM clock 79% of its peers' median"
    )
    assert evidence_words({"link_drop": 0.5, "new_key": 1}) == 'link rate down 50%; {"new_key": 1}'
