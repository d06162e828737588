"""The Reports page in real headless Chromium (issue 38, items 5 and 14) over tests/reports/window_telemetry.py's
night, its minute rollups kept back to 21:30 only: the page states the window it counts, to the minute, and
which part it could count in whole hours only; and the chart's grey part says what it is."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from gpuscope.bench.browser import console_errors, open_page, wait_until
from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.dashboard.pages import reports
from gpuscope.dashboard_process import DashboardSettings
from tests.conftest import new_database
from tests.dashboard.helpers import running_dashboard
from tests.reports.window_telemetry import RATES_YAML, at, drop_minutes_before, seed


@pytest.fixture(scope="module")
def site(postgres: EmbeddedPostgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, datetime]]:
    dsn = new_database(postgres)
    base = seed(dsn)
    drop_minutes_before(dsn, base + at(21, 30))
    config = tmp_path_factory.mktemp("usage-window-page") / "reports.yaml"
    config.write_text(RATES_YAML, encoding="utf-8")
    settings = DashboardSettings(db=dsn, listen="127.0.0.1:0", refresh_ms=60_000, reports_config=config)
    with running_dashboard(settings) as url:
        yield url, base


def span(start: datetime, end: datetime) -> str:
    """The page's ?range= for a span (UTC, to the minute)."""
    return f"{start:%Y-%m-%dT%H:%M}..{end:%Y-%m-%dT%H:%M}"


def status_lines(browser: Any) -> list[str]:
    wait_until(browser, lambda: browser.find_element("id", "reports-status").text, 10, "the status line")
    return str(browser.find_element("id", "reports-status").text).splitlines()


def test_the_page_states_the_window_and_the_part_in_whole_hours(site: tuple[str, datetime], browser: Any) -> None:
    url, base = site
    day, next_day = f"{base:%Y-%m-%d}", f"{base + at(0):%Y-%m-%d}"
    open_page(browser, f"{url}/reports?range={span(base + at(21, 45), base + at(0, 13))}")
    lines = status_lines(browser)
    assert lines[0].startswith(f"From {day} 21:45 to {next_day} 00:13 UTC"), lines
    assert len(lines) == 1, "every edge had its minutes"
    # alice's 4 GPUs from 21:45 to 00:13 and bob's 30 minutes (inside): not the 16 + 65 + 20 minutes of 21:00-01:00.
    allocated = browser.find_element("id", "reports-allocated-value").text
    assert allocated == f"{reports.hours(4 * 148 / 60 + 0.5)} GPU-h", allocated
    open_page(browser, f"{url}/reports?range={span(base + at(21, 13), base + at(0, 13))}")
    lines = status_lines(browser)
    assert lines[0].startswith(f"From {day} 21:00 to {next_day} 00:13 UTC"), lines
    assert lines[1] == (
        f"Whole hours only from {day} 21:00 to {day} 22:00 UTC: the minute rollups there are past their retention"
    )
    assert console_errors(browser) == []


def test_the_charts_grey_part_says_what_it_is(site: tuple[str, datetime], browser: Any) -> None:
    url, base = site
    open_page(browser, f"{url}/reports?range={span(base + at(21, 45), base + at(0, 13))}")
    entries = wait_until(browser, lambda: browser.find_elements("css selector", "#reports-chart .legendtext"), 10)
    legend = [e.get_attribute("textContent") for e in entries]
    assert legend == ["active", "idle", "rest: partly busy, short pauses, unmeasured"]
