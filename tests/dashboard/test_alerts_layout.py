"""The alerts page fits a laptop's screen, in real headless Chromium over incident_cluster.py: at 1,600 px
wide (and at 1,280) the table is no wider than the window, the summary, "since" and "Silence this" are on
screen, and each row is one or two lines, not a column of wrapped words."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpuscope.bench.browser import console_errors, open_page, screenshot, wait_until
from gpuscope.core.embedded_pg import EmbeddedPostgres
from tests.dashboard.helpers import dashboard_over_incident

# Each cell's text at most two lines (the page's font: 14 px, line height 1.55), plus the cell's padding.
TWO_LINES_PX = 2 * 14 * 1.55 + 12

MEASURE = """
const table = document.getElementById('alerts-active-table');
const right = el => el.getBoundingClientRect().right;
return {
  page: document.documentElement.scrollWidth,
  window: window.innerWidth,
  table: right(table),
  last: Math.max(...[...table.querySelectorAll('td.col-since, td.col-silence, td.col-summary')].map(right)),
  rows: [...table.querySelectorAll('tbody tr')].map(r => r.getBoundingClientRect().height),
  buttons: table.querySelectorAll('button.silence-this').length,
};
"""


@pytest.fixture(scope="module")
def dashboard(postgres: EmbeddedPostgres) -> Iterator[str]:
    # Silences go through a collector: with its address set, every alert gets its "Silence this" button
    # (nothing here is clicked, so none need answer).
    with dashboard_over_incident(postgres, collector_url="http://127.0.0.1:9") as url:
        yield url


@pytest.mark.parametrize("width", [1600, 1280])
def test_the_alerts_table_fits_the_window_in_compact_rows(dashboard: str, browser: Any, width: int) -> None:
    browser.set_window_size(width, 1000)
    try:
        open_page(browser, dashboard + "/alerts")
        wait_until(browser, lambda: browser.find_elements("css selector", "#alerts-active-table tbody tr"))
        found = browser.execute_script(MEASURE)
        assert found["buttons"] >= 10, found
        assert found["page"] <= found["window"], f"the page scrolls sideways: {found}"
        assert found["table"] <= found["window"] and found["last"] <= found["window"], found
        assert max(found["rows"]) <= TWO_LINES_PX, f"rows of more than two lines: {found['rows']}"
        screenshot(browser, f"alerts-at-{width}px")
        assert console_errors(browser) == []
    finally:
        browser.set_window_size(1400, 1000)


def test_a_long_summary_is_whole_on_hover(dashboard: str, browser: Any) -> None:
    open_page(browser, dashboard + "/alerts")
    cells = wait_until(
        browser, lambda: browser.find_elements("css selector", "#alerts-active-table td.col-summary .two-lines")
    )
    summaries = [c.get_attribute("title") for c in cells]
    assert "Job nb-1 (hiro) holds 8 of its 8 GPUs idle" in summaries
    assert "Uncorrectable ECC errors on GPU 2 of gpu-e01: 1 in 10 minutes" in summaries
