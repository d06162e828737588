"""The alerts page in real headless Chromium, over the busy little cluster (busy_cluster.py) with a real alert
engine: labels shown for people (node, GPU and job linked, UUIDs shortened), "Silence this" filling the
form with exactly that alert's labels, and each silence created in the name of who is at the keyboard: the
name typed, or the basic-auth login. The label and matcher helpers are tested without a browser at the end."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gpuscope.alerts.matchers import all_match, parse_matcher
from gpuscope.bench.browser import console_errors, open_page, screenshot, wait_until
from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.dashboard.alert_labels import identifying, matchers_text, split_matchers
from gpuscope.dashboard.uuids import short_uuid
from tests.dashboard.busy_stack import ADMIN, PASSWORD, Stack, alerting_stack


@pytest.fixture(scope="module")
def stack(postgres: EmbeddedPostgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with alerting_stack(postgres, tmp_path_factory.mktemp("auth") / "users") as running:
        yield running


def alert_row(browser: Any, *words: str) -> Any:
    """The row of the firing table whose text holds all these words (exactly one)."""
    rows = browser.find_elements("css selector", "#alerts-active-table tbody tr")
    [row] = [r for r in rows if all(w in r.text for w in words)]
    return row


def test_labels_read_as_places_and_jobs_with_links(stack: Stack, browser: Any) -> None:
    open_page(browser, stack.dashboard + "/alerts")
    table = browser.find_element("id", "alerts-active-table")
    assert "=" not in table.text, "no raw key=value labels"
    hot = alert_row(browser, "GpuOverTemperature", "gpu-b01")
    node = hot.find_element("link text", "gpu-b01")
    assert node.get_attribute("href") == f"{stack.dashboard}/node/gpu-b01"
    assert node.get_attribute("title") == "cluster c · rack r2"
    assert hot.find_element("link text", "GPU 3").get_attribute("href") == f"{stack.dashboard}/node/gpu-b01?gpu=3"
    full = stack.loaded.eval_uuids[3]
    uuid = hot.find_element("css selector", ".uuid")
    assert uuid.text == full[:12] + "…" and uuid.get_attribute("title") == full
    assert hot.find_elements("css selector", ".badge-warning")
    idle = alert_row(browser, "GpuIdleInJob", "GPU 2")
    job = idle.find_element("link text", "eval-3")
    assert job.get_attribute("href") == f"{stack.dashboard}/jobs/eval-3" and "eval-3 (bob)" in idle.text
    xid = alert_row(browser, "GpuXidError")
    assert "xid 79" in xid.text and xid.find_elements("css selector", ".badge-critical")
    straggler = alert_row(browser, "JobStraggler")
    assert "cause thermal" in straggler.text and straggler.find_element("link text", "train-7")
    screenshot(browser, "alerts-readable")
    job.click()
    wait_until(browser, lambda: browser.find_element("id", "job-title").text == "Job eval-3", 10, "the job's page")
    assert console_errors(browser) == []


def test_silence_this_fills_in_the_alert_and_records_who_and_why(stack: Stack, browser: Any) -> None:
    from selenium.webdriver.common.keys import Keys

    open_page(browser, stack.dashboard + "/alerts")
    alert_row(browser, "GpuOverTemperature", "gpu-b01").find_element("css selector", "button.silence-this").click()
    matchers = browser.find_element("id", "silence-matchers")
    wanted = "alertname=GpuOverTemperature, cluster=c, node=gpu-b01, gpu=3"
    wait_until(browser, lambda: matchers.get_attribute("value") == wanted, 10, "the form filled in")
    wait_until(browser, lambda: browser.switch_to.active_element.get_attribute("id") == "silence-comment", 5, "focus")
    browser.switch_to.active_element.send_keys("fan swap, ticket OPS-12")
    browser.find_element("id", "silence-token").send_keys(ADMIN)
    browser.find_element("id", "silence-create").click()
    result = browser.find_element("id", "silence-result")
    wait_until(browser, lambda: "Type your name" in result.text, 10, "the name asked for")
    browser.find_element("id", "silence-author").send_keys("jane", Keys.TAB)
    browser.find_element("id", "silence-create").click()
    wait_until(browser, lambda: "Created silence" in result.text, 10, "the silence created")
    listed = wait_until(browser, lambda: browser.find_element("id", "silences-table").text, 10, "the silences list")
    assert wanted in listed and "jane" in listed and "fan swap, ticket OPS-12" in listed
    [silence] = httpx.get(f"{stack.collector}/api/v1/silences", timeout=5).json()
    assert silence["created_by"] == "jane" and silence["comment"] == "fan swap, ticket OPS-12"
    # Exactly that alert: the other hot GPU still has its button.
    muted = "silenced by #{} (jane)".format(silence["id"])
    wait_until(browser, lambda: muted in alert_row(browser, "GpuOverTemperature", "gpu-b01").text, 10, "muted")
    assert alert_row(browser, "GpuOverTemperature", "gpu-a02").find_elements("css selector", "button.silence-this")
    screenshot(browser, "alerts-silenced-by-name")
    browser.find_element("css selector", "#silences-table button").click()
    wait_until(browser, lambda: "Expired silence" in result.text, 10, "expiry")
    assert console_errors(browser) == []


def test_a_logged_in_user_silences_in_their_own_name(stack: Stack, browser: Any) -> None:
    login = base64.b64encode(f"ada:{PASSWORD}".encode()).decode()
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Basic {login}"}})
    try:
        open_page(browser, stack.logged_in + "/alerts")
        assert "as ada" in browser.find_element("id", "silence-form").text
        alert_row(browser, "JobStraggler").find_element("css selector", "button.silence-this").click()
        matchers = browser.find_element("id", "silence-matchers")
        wanted = "alertname=JobStraggler, cluster=c, node=gpu-a02, gpu=2, job_id=train-7, cause=thermal"
        wait_until(browser, lambda: matchers.get_attribute("value") == wanted, 10, "the form filled in")
        browser.find_element("id", "silence-comment").send_keys("known: GPU 2 RMA")
        browser.find_element("id", "silence-token").send_keys(ADMIN)
        browser.find_element("id", "silence-create").click()
        result = browser.find_element("id", "silence-result")
        wait_until(browser, lambda: "Created silence" in result.text, 10, "the silence created")
        silences = httpx.get(f"{stack.collector}/api/v1/silences", timeout=5).json()
        assert [s["created_by"] for s in silences if s["comment"] == "known: GPU 2 RMA"] == ["ada"]
        assert console_errors(browser) == []
    finally:
        browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {}})


# Without a browser: which labels a silence takes, and that the form's text reads back as the same matchers.


def test_a_silence_of_an_alert_matches_it_and_not_its_neighbours() -> None:
    labels = {
        "alertname": "GpuIdleInJob", "severity": "info", "cluster": "c", "rack": "r2", "node": "gpu-b01",
        "gpu": "2", "uuid": "GPU-5f1c0a2e-0000-4000-8000-000000000000", "job_id": "eval-3", "user": "bob",
    }  # fmt: skip
    pinned = identifying(labels)
    assert pinned == {"alertname": "GpuIdleInJob", "cluster": "c", "node": "gpu-b01", "gpu": "2", "job_id": "eval-3"}
    matchers = [parse_matcher(m) for m in split_matchers(matchers_text(pinned))]
    assert all_match(matchers, labels)
    assert not all_match(matchers, labels | {"gpu": "3"}) and not all_match(matchers, labels | {"job_id": "x"})


def test_odd_values_survive_the_form() -> None:
    labels = {"alertname": "A", "node": "a, b=c", "pod": " padded ", "rack": '"quoted"', "device": ""}
    parsed = [parse_matcher(m) for m in split_matchers(matchers_text(labels))]
    assert {m.name: m.value for m in parsed} == labels
    assert split_matchers("node=gpu-07,alertname=X , gpu!=3") == ["node=gpu-07", "alertname=X", "gpu!=3"]


def test_uuids_are_shortened_to_what_tells_gpus_apart() -> None:
    assert short_uuid("GPU-5f1c0a2e-1111-4000-8000-000000000000") == "GPU-5f1c0a2e…"
    assert short_uuid("MIG-0123456789abcdef") == "MIG-01234567…"
    assert short_uuid("GPU-0") == "GPU-0" and short_uuid("x" * 40) == "x" * 12 + "…"
