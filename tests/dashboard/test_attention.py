"""The overview's "Needs attention" in real headless Chromium over incident_cluster.py (the shipped rules
evaluated by the real engine): one line per node or job naming its most severe cause, the rest counted and
one click away on the alerts page filtered to it, most severe first; and the GPUs idle in a job one click
from the job holding them."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from gpuscope.bench.browser import console_errors, open_page, screenshot, wait_until
from gpuscope.core.embedded_pg import EmbeddedPostgres
from tests.dashboard import incident_cluster as cluster
from tests.dashboard.helpers import dashboard_over_incident


@pytest.fixture(scope="module")
def dashboard(postgres: EmbeddedPostgres) -> Iterator[str]:
    with dashboard_over_incident(postgres) as url:
        yield url


def attention_lines(browser: Any) -> list[Any]:
    return wait_until(
        browser, lambda: browser.find_elements("css selector", "#attention-list > li"), what="Needs attention"
    )


def lines_naming(browser: Any, word: str) -> list[Any]:
    return [line for line in attention_lines(browser) if word in line.text]


def test_one_incident_is_one_line_named_by_its_worst_cause(dashboard: str, browser: Any) -> None:
    open_page(browser, dashboard)
    (ecc,) = lines_naming(browser, cluster.ECC_NODE)
    assert ecc.find_elements("css selector", ".badge-critical")
    assert "GpuEccUncorrectable" in ecc.text, "the most severe cause, not the first XID"
    # The rest: the three XIDs (one cause), the drain, the row remap pending that no alert tells.
    more = ecc.find_element("css selector", "a.attention-more")
    assert more.text == "+3 more" and more.get_attribute("href") == f"{dashboard}/alerts?node={cluster.ECC_NODE}"
    hover = more.get_attribute("title")
    assert "GpuXidError (3 alerts)" in hover and "NodeDrained" in hover and "GPU 2: row remap pending" in hover
    assert len(lines_naming(browser, "straggler")) == 1, "the finding and its alert are one line"
    (idle,) = lines_naming(browser, cluster.IDLE_JOB)
    assert "JobHoldsIdleGpus" in idle.text and "holds 8 of its 8 GPUs idle" in idle.text
    assert (
        idle.find_element("css selector", "a.attention-more")
        .get_attribute("title")
        .startswith("GpuIdleInJob (8 alerts)")
    ), "eight per-GPU alerts of the job under its line"
    screenshot(browser, "overview-attention-grouped")
    assert console_errors(browser) == []


def test_lines_go_most_severe_first_then_newest(dashboard: str, browser: Any) -> None:
    open_page(browser, dashboard)
    severities = [line.find_element("css selector", ".badge").text.lower() for line in attention_lines(browser)]
    rank = {"critical": 0, "warning": 1, "info": 2}
    assert severities == sorted(severities, key=rank.__getitem__), severities
    warnings = [line.text for line in attention_lines(browser) if "warning" in line.text.lower()[:12]]
    assert cluster.TRAINING_JOB in warnings[0] and cluster.WARNING_NODE in warnings[-1], "the older warning last"
    text = browser.find_element("id", "attention").text
    assert "(since" not in text and "started 40 min ago" in text
    assert "1 uncorrectable ECC errors" not in text


def test_the_rest_of_a_line_is_one_click_away(dashboard: str, browser: Any) -> None:
    open_page(browser, dashboard)
    (ecc,) = lines_naming(browser, cluster.ECC_NODE)
    ecc.find_element("css selector", "a.attention-more").click()
    rows = wait_until(
        browser, lambda: browser.find_elements("css selector", "#alerts-active-table tbody tr"), what="the alerts"
    )
    names = sorted(row.find_element("css selector", "td.col-alert strong").text for row in rows)
    assert names == ["GpuEccUncorrectable", "GpuXidError", "GpuXidError", "GpuXidError", "NodeDrained"]
    assert f"node {cluster.ECC_NODE}" in browser.find_element("id", "alerts-filtered").text
    browser.find_element("id", "alerts-show-all").click()
    wait_until(
        browser,
        lambda: len(browser.find_elements("css selector", "#alerts-active-table tbody tr")) > len(names),
        what="every alert again",
    )
    assert console_errors(browser) == []


def test_gpus_idle_in_a_job_lead_to_the_job(dashboard: str, browser: Any) -> None:
    open_page(browser, dashboard)
    idle = wait_until(browser, lambda: browser.find_element("id", "gpus-idle-link"), what="the idle GPUs' link")
    assert idle.text == "8 idle in a job"
    assert idle.get_attribute("href") == f"{dashboard}/jobs/{cluster.IDLE_JOB}"
    idle.click()
    wait_until(browser, lambda: f"/jobs/{cluster.IDLE_JOB}" in browser.current_url, what="the job's page")


def test_gpus_idle_in_several_jobs_lead_to_the_jobs_holding_idle_gpus() -> None:
    from gpuscope.dashboard.pages.overview import _state_link

    link = _state_link("idle", ["9 idle in a job"], SimpleNamespace(idle_jobs=["a", "b"]))  # type: ignore[arg-type]
    assert link.href == "/jobs?idle=1"
    assert _state_link("free", ["3 free"], SimpleNamespace(idle_jobs=["a"])) == ["3 free"]  # type: ignore[arg-type]


def test_a_straggler_leads_to_its_gpu_and_the_card_to_the_jobs_with_one(dashboard: str, browser: Any) -> None:
    open_page(browser, dashboard)
    (line,) = lines_naming(browser, "straggler")
    culprit = line.find_element("css selector", f"a[href*='/node/{cluster.TRAINING_NODE}']")
    assert culprit.get_attribute("href").endswith(f"/node/{cluster.TRAINING_NODE}?gpu=1"), "the GPU, not the node"
    card = browser.find_element("css selector", "#stragglers a.card-link")
    assert card.get_attribute("href").endswith("/jobs?straggler=1"), "the jobs with a straggler, not all jobs"
