"""The collector's /docs in headless Chromium, which reaches nothing beyond loopback here: Swagger UI
renders the API (title, the ingest route) from the collector's own files."""

from __future__ import annotations

from typing import Any

from gpuscope.bench.browser import console_errors, screenshot, wait_until
from tests.processes import RunningCollector


def test_swagger_ui_renders_offline(collector: RunningCollector, browser: Any) -> None:
    browser.get(collector.url + "/docs")
    title = wait_until(
        browser, lambda: browser.find_element("css selector", ".swagger-ui .info .title").text, 20, "title"
    )
    assert "gpuscope collector" in title
    paths = wait_until(
        browser,
        lambda: [e.text for e in browser.find_elements("css selector", ".opblock-summary-path")] or None,
        20,
        "the operations",
    )
    assert "/api/v1/samples" in paths and "/api/v1/jobs/{job_id}" in paths, paths
    screenshot(browser, "collector-docs")
    assert console_errors(browser) == []
