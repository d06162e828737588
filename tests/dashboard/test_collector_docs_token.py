"""The collector's /docs with a read token set (--read-token-file), in headless Chromium: a browser sends
no token by itself, so the page (and Swagger UI's files) is served without one and asks for it; the API's
description stays behind the token, a wrong token is said so, and the right one shows the API and goes
with the requests "Try it out" sends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gpuscope.bench.browser import console_errors, screenshot, wait_until
from tests.processes import RunningCollector, running_collector

READ_TOKEN = "read-token-for-the-docs-test"


@pytest.fixture
def guarded(dsn: str) -> Iterator[RunningCollector]:
    with running_collector(dsn, read_token=READ_TOKEN) as collector:
        yield collector


def test_the_page_is_open_and_the_description_stays_behind_the_token(guarded: RunningCollector) -> None:
    page = httpx.get(guarded.url + "/docs", timeout=10)
    assert page.status_code == 200 and "read token" in page.text
    assert READ_TOKEN not in page.text
    assert httpx.get(guarded.url + "/docs-assets/swagger-ui-bundle.js", timeout=10).status_code == 200
    assert httpx.get(guarded.url + "/docs-assets/../openapi.json", timeout=10).status_code == 401
    assert httpx.get(guarded.url + "/openapi.json", timeout=10).status_code == 401
    with_token = httpx.get(guarded.url + "/openapi.json", headers={"Authorization": f"Bearer {READ_TOKEN}"})
    assert with_token.status_code == 200


def test_the_page_asks_for_the_token_and_then_shows_the_api(guarded: RunningCollector, browser: Any) -> None:
    browser.get(guarded.url + "/docs")
    field = wait_until(browser, lambda: _visible(browser, "#token"), 20, "the token field")
    field.send_keys("not-the-read-token")
    browser.find_element("css selector", "#token-form button").click()
    problem = wait_until(browser, lambda: browser.find_element("css selector", "#token-problem").text, 20, "why")
    assert "did not accept that token (HTTP 401)" in problem

    field = wait_until(browser, lambda: _visible(browser, "#token"), 20, "the token field again")
    field.clear()
    field.send_keys(READ_TOKEN)
    browser.find_element("css selector", "#token-form button").click()
    paths = wait_until(
        browser,
        lambda: [e.text for e in browser.find_elements("css selector", ".opblock-summary-path")] or None,
        20,
        "the operations",
    )
    assert "/api/v1/fleet" in paths, paths
    assert not _visible(browser, "#token-form"), "the form gives way to the API"

    # "Try it out" on GET /api/v1/fleet: its request carries the token, so the collector answers 200.
    fleet = next(
        e for e in browser.find_elements("css selector", ".opblock-get") if "/api/v1/fleet" in e.text.split("\n")
    )
    fleet.find_element("css selector", ".opblock-summary").click()
    wait_until(browser, lambda: fleet.find_element("css selector", ".try-out__btn"), 20, "Try it out").click()
    wait_until(browser, lambda: fleet.find_element("css selector", ".execute"), 20, "Execute").click()
    status = wait_until(
        browser,
        lambda: fleet.find_element("css selector", ".live-responses-table tbody .response-col_status").text,
        20,
        "the answer",
    )
    assert status.strip() == "200", status
    screenshot(browser, "collector-docs-with-token")
    assert [e for e in console_errors(browser) if "401" not in e] == []


def _visible(browser: Any, selector: str) -> Any:
    found = browser.find_elements("css selector", selector)
    return found[0] if found and found[0].is_displayed() else None
