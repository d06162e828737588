"""The Reports page in real headless Chromium over a real database whose usage the collector's code computed
from samples and allocations (tests/collector/test_usage.py's two hours: alice's job on an H100, bob's two on
an A100) plus a Kubernetes job of a user with a hostile name: the table's figures are the query's, a header
sorts it (in the URL), the grouping follows the control, a missing key says why, hostile text stays text,
and the CSV and Parquet downloads hold the table's rows."""

from __future__ import annotations

import asyncio
import base64
import csv
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gpuscope.bench.browser import console_errors, open_page, screenshot, wait_until
from gpuscope.collector import query
from gpuscope.collector.query.usage import Dimension, Figures, Rates, UsageReport, UsageRow, usage_report
from gpuscope.collector.store.usage import compute_hour
from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.dashboard.pages import reports
from gpuscope.dashboard.pages.reports import ReportsView
from gpuscope.dashboard_process import DashboardSettings
from gpuscope.reports.config import load_reports_config
from tests.collector.test_usage import _base, _seed
from tests.conftest import new_database, require_tool
from tests.dashboard.helpers import running_dashboard, serving
from tests.dashboard.test_colour_schemes import LOOK_JS, check_legible, switch_to

HOSTILE = "<img src=x onerror=window.pwned=1>{window.pwned=2}"
RATES_YAML = "currency: EUR\nprices:\n  - {model: '*h100*', per_gpu_hour: 2.0}\ngrid_g_per_kwh: 500\n"


@dataclass(frozen=True)
class Site:
    url: str
    dsn: str
    rates: Rates
    downloads: Path


def seed(dsn: str) -> None:
    """test_usage's two hours, and a Kubernetes job (no account, no partition) of HOSTILE on the A100 for
    minutes 85-120, idle throughout; both hours computed again with it."""
    base = _base()
    _seed(dsn, base)
    with psycopg.connect(dsn, autocommit=True) as conn:
        node, gpu = conn.execute("SELECT node_id, gpu_id FROM gpu WHERE uuid = 'GPU-1'").fetchone()  # type: ignore[misc]
        conn.execute(
            "INSERT INTO job_allocation (job_id, username, namespace, node_id, gpu_id, started_at, last_seen,"
            " ended_at) VALUES ('j4', %s, 'ml', %s, %s, %s, %s, %s)",
            (HOSTILE, node, gpu, base + timedelta(minutes=85), *[base + timedelta(minutes=120)] * 2),
        )
        # What stragglers cost: alice's j1 (one GPU) ran 25% slower for 30 minutes (0.5 h x 0.25 / 1.25 =
        # 0.1 GPU-h); bob's j2 was slowed 50% by the fabric for 12 minutes (0.2 h x 0.5 / 1.5 = 0.0667).
        conn.execute(
            "INSERT INTO straggler (job_id, cluster, node_id, gpu_id, cause, slowdown, started_at, declared_at,"
            " ended_at) VALUES ('j1', 'c', %s, %s, 'thermal', 0.25, %s, %s, %s),"
            " ('j2', 'c', NULL, NULL, 'fabric', 0.5, %s, %s, %s)",
            (
                node, gpu, base + timedelta(minutes=30), base + timedelta(minutes=31), base + timedelta(minutes=60),
                base + timedelta(minutes=20), base + timedelta(minutes=22), base + timedelta(minutes=32),
            ),
        )  # fmt: skip

    async def recompute() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            for hour in (base, base + timedelta(hours=1)):
                await compute_hour(conn, hour, datetime.now(UTC))

    asyncio.run(recompute())


@pytest.fixture(scope="module")
def site(postgres: EmbeddedPostgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    require_tool("chromium")
    require_tool("chromedriver")
    dsn = new_database(postgres)
    seed(dsn)
    folder = tmp_path_factory.mktemp("reports")
    config = folder / "reports.yaml"
    config.write_text(RATES_YAML, encoding="utf-8")
    settings = DashboardSettings(db=dsn, listen="127.0.0.1:0", refresh_ms=60_000, reports_config=config)
    with running_dashboard(settings) as url:
        yield Site(url, dsn, load_reports_config(config).rates, folder / "downloads")


def expected(site: Site, by: Dimension) -> UsageReport:
    with psycopg.connect(site.dsn) as conn:
        return usage_report(conn, query.last(24 * 3600), by, site.rates)


def rows_shown(browser: Any) -> list[list[str]]:
    rows = browser.find_elements("css selector", "#reports-rows > tbody > tr")
    return [[str(td.get_attribute("textContent")) for td in row.find_elements("css selector", "td")] for row in rows]


def keys_shown(browser: Any) -> list[str]:
    return [cells[0] for cells in rows_shown(browser)]


def close(text: str, value: float) -> bool:
    """The figure as the page rounds it (a hundredth under 10, else a tenth)."""
    return abs(float(text.replace(",", "")) - value) <= (0.05 if abs(value) >= 10 else 0.005) + 1e-9


def check_figures(shown: list[str], row: UsageRow) -> None:
    _, jobs, allocated, active, idle, idle_pct, energy, cost, co2, basis = shown
    f = row.figures
    assert int(jobs) == row.jobs
    for text, value in ((allocated, f.gpu_hours_allocated), (active, f.gpu_hours_active), (idle, f.gpu_hours_idle),
                        (energy, f.energy_kwh), (co2, f.co2_kg)):  # fmt: skip
        assert close(text, value), (row.key, text, value)
    assert int(idle_pct) == round(100 * f.gpu_hours_idle / f.gpu_hours_allocated)
    assert cost == "-" if f.cost is None else close(cost, f.cost)
    assert basis == f.active_basis


def test_the_table_is_the_querys_and_hostile_text_stays_text(site: Site, browser: Any) -> None:
    open_page(browser, site.url + "/reports?range=24h")
    report = expected(site, "user")
    shown = rows_shown(browser)
    assert [cells[0] for cells in shown] == ["alice", "bob", HOSTILE], "the most GPU-hours allocated first"
    for cells, row in zip(shown, report.rows, strict=True):
        check_figures(cells, row)
    # By hand (test_usage's figures): alice held her H100 two hours at 2 EUR each; the A100 has no price.
    assert shown[0][2] == "2.00" and shown[0][7] == "4.00" and shown[1][7] == "-"
    assert browser.find_element("id", "reports-allocated-value").text == f"{reports.hours(41 / 12)} GPU-h"
    assert browser.find_element("id", "reports-cost-value").text == "4.00 EUR"
    assert "excludes 1.42 GPU-h without a price" in browser.find_element("id", "reports-cost-note").text
    idle_share = round(100 * report.totals.gpu_hours_idle / report.totals.gpu_hours_allocated)
    assert browser.find_element("id", "reports-idle-note").text == f"{idle_share}% of allocated"
    headers = [h.text for h in browser.find_elements("css selector", "#reports-rows th")]
    assert headers[0] == "user" and headers[7] == "cost (EUR)"
    # The hostile name: text in the table and on the chart's axis, nothing run, no image made.
    ticks = [t.get_attribute("textContent") for t in browser.find_elements("css selector", "#reports-chart .ytick")]
    assert HOSTILE in ticks and "alice" in ticks
    assert browser.execute_script("return window.pwned") is None
    assert not browser.find_elements("css selector", "#page img")
    screenshot(browser, "reports", whole_page=True)
    assert console_errors(browser) == []


def test_what_stragglers_cost_is_shown_by_job_and_cause(site: Site, browser: Any) -> None:
    open_page(browser, site.url + "/reports?range=24h")
    wait_until(browser, lambda: browser.find_elements("id", "reports-stragglers-table"))
    summary = browser.find_element("id", "reports-stragglers-summary").text
    assert summary.startswith("0.2 GPU-hours lost in 2 episodes (thermal 0.1, fabric 0.1)"), summary
    rows = [
        [td.text for td in tr.find_elements("css selector", "td")]
        for tr in browser.find_elements("css selector", "#reports-stragglers-table tbody tr")
    ]
    assert rows == [["j1", "1", "0.10"], ["j2", "1", "0.07"]]
    link = browser.find_element("css selector", "#reports-stragglers-table a")
    assert link.get_attribute("href").endswith("/jobs/j1")
    assert console_errors(browser) == []


def test_a_header_sorts_and_the_url_keeps_it(site: Site, browser: Any) -> None:
    open_page(browser, site.url + "/reports?range=24h&by=user")
    browser.find_element("link text", "idle (GPU-h)").click()  # idle: alice 70 min, HOSTILE 35, bob 30
    wait_until(browser, lambda: "sort=-idle" in browser.current_url, 10, "the sort in the URL")
    wait_until(browser, lambda: keys_shown(browser) == ["alice", HOSTILE, "bob"], 10, "the most idle first")
    browser.find_element("link text", "idle (GPU-h) ▼").click()
    wait_until(browser, lambda: keys_shown(browser) == ["bob", HOSTILE, "alice"], 10, "the least idle first")
    assert "sort=idle" in browser.current_url
    browser.find_element("link text", "user").click()  # names A to Z: '<' sorts before letters
    wait_until(browser, lambda: keys_shown(browser) == [HOSTILE, "alice", "bob"], 10, "by name")
    open_page(browser, site.url + "/reports?range=24h&sort=-energy")  # a shared address opens sorted
    energies = [float(cells[6]) for cells in rows_shown(browser)]
    assert energies == sorted(energies, reverse=True)
    assert console_errors(browser) == []


def test_group_by_account_and_by_job(site: Site, browser: Any) -> None:
    open_page(browser, site.url + "/reports?range=24h")
    browser.find_element("css selector", "#reports-by input[value='account']").click()
    wait_until(browser, lambda: "by=account" in browser.current_url, 10, "the grouping in the URL")
    wait_until(browser, lambda: keys_shown(browser) == ["a1", "a2", "(none)"], 10, "the accounts")
    for cells, row in zip(rows_shown(browser), expected(site, "account").rows, strict=True):
        check_figures(cells, row)
    none = browser.find_element("css selector", "#reports-rows tbody tr:last-child td span.gap")
    assert "Kubernetes jobs have none" in none.get_attribute("title")
    open_page(browser, site.url + "/reports?range=24h&by=job")
    assert browser.find_element("css selector", "#reports-by input[value='job']").is_selected()
    assert keys_shown(browser) == ["j1", "j4", "j2", "j3"]
    j4 = browser.find_element("link text", "j4")
    assert j4.get_attribute("href") == site.url + "/jobs/j4"
    assert j4.get_attribute("title") == f"user {HOSTILE}, namespace ml"
    assert browser.execute_script("return window.pwned") is None
    assert console_errors(browser) == []


def same_window(start: Any, end: Any, report: UsageReport) -> bool:
    """The export's window is the report's: the last 24 hours to the minute, read when the button was pressed
    (a minute may have turned since the test's report was read)."""
    shown = [datetime.fromisoformat(t) if isinstance(t, str) else t for t in (start, end)]
    return all(
        timedelta(0) <= s - r <= timedelta(minutes=1) for s, r in zip(shown, (report.start, report.end), strict=True)
    )


def downloaded(browser: Any, folder: Path, suffix: str) -> Path:
    """The one file of that kind Chromium saved in `folder`, once complete."""

    def done() -> Path | None:
        found = list(folder.glob(f"*{suffix}"))
        return found[0] if len(found) == 1 and not list(folder.glob("*.crdownload")) else None

    return Path(wait_until(browser, done, 10, f"the {suffix} download"))


def test_csv_and_parquet_downloads_hold_the_rows(site: Site, browser: Any) -> None:
    import pyarrow.parquet as pq

    site.downloads.mkdir(exist_ok=True)
    browser.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(site.downloads)})
    open_page(browser, site.url + "/reports?range=24h&by=user&sort=-idle")
    report = expected(site, "user")
    by_key = {row.key: row for row in report.rows}
    browser.find_element("id", "reports-csv").click()
    with downloaded(browser, site.downloads, ".csv").open(encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    assert [r["key"] for r in rows] == ["alice", HOSTILE, "bob"], "the table's order"
    for r in rows:
        figures = by_key[r["key"]].figures.as_json()
        assert same_window(r["start"], r["end"], report) and r["by"] == "user"
        assert int(r["jobs"]) == by_key[r["key"]].jobs and r["currency"] == "EUR"
        for name, value in figures.items():
            if isinstance(value, float):
                assert math.isclose(float(r[name]), value, rel_tol=1e-12), name
            else:
                assert r[name] == ("" if value is None else str(value)), name
    browser.find_element("id", "reports-parquet").click()
    table = pq.read_table(downloaded(browser, site.downloads, ".parquet"))
    assert table.column_names == reports.export_columns("user")
    assert str(table.schema.field("cost").type) == "double" and str(table.schema.field("jobs").type) == "int64"
    for r in table.to_pylist():
        assert same_window(r["start"], r["end"], report) and r["by"] == "user"
        assert {k: r[k] for k in report.totals.as_json()} == by_key[r["key"]].figures.as_json()
    assert [r["key"] for r in table.to_pylist()] == ["alice", HOSTILE, "bob"]
    assert browser.find_element("id", "reports-export-error").text == ""
    assert console_errors(browser) == []


def test_parquet_without_pyarrow_says_so_and_csv_defuses_formulas(monkeypatch: pytest.MonkeyPatch) -> None:
    figures = Figures(1.0, 1.0, 0.5, 0.1, 0.2, 0.3, None, 0.1, 1.0, "util", 0.0)
    start = datetime(2026, 11, 20, tzinfo=UTC)
    rows = [UsageRow('=HYPERLINK("http://x")', figures, 1), UsageRow(None, figures, 2)]
    report = UsageReport(start, start + timedelta(hours=1), "user", rows, figures, 3, None, start)
    data, message = reports.export(ReportsView(), report, "csv")
    lines = base64.b64decode(data["content"]).decode().splitlines()
    assert lines[0].startswith("start,end,by,key,jobs,gpu_hours_allocated")
    assert lines[1].split(",")[3] == '"\'=HYPERLINK(""http://x"")"' and message == ""
    assert data["filename"] == "gpuscope-usage-by-user-20261120T0000-20261120T0100.csv"
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if not installed
    data, message = reports.export(ReportsView(), report, "parquet")
    assert message.startswith("Parquet export needs pyarrow") and not isinstance(data, dict)
    assert reports.cost_words(figures, None, Rates())[0] == "no price configured"


def test_the_view_comes_from_the_url() -> None:
    assert ReportsView.from_search("?range=30d&by=account&sort=-idle") == ReportsView("30d", "account", "-idle")
    assert ReportsView.from_search("?range=forever&by=<b>&sort=nope") == ReportsView("7d", "user", "")
    span = "2026-11-01T00:00..2026-11-08T00:00"
    assert ReportsView.from_search(f"?range={span}").window().seconds == 7 * 86400
    assert ReportsView("24h", "job").sorted_by("idle").search() == "?range=24h&by=job&sort=-idle"
    assert ReportsView("24h", "job", "-idle").sorted_by("idle").sort == "idle"
    assert ReportsView().sorted_by("key").sort == "key"


def test_the_page_reads_in_both_schemes(site: Site, browser: Any) -> None:
    open_page(browser, site.url + "/reports?range=24h")
    for scheme in ("dark", "light"):  # light last: the browser keeps the choice for the tests after this one
        switch_to(browser, scheme)
        open_page(browser, site.url + "/reports?range=24h")  # a reload: the page as the kept choice draws it
        check_legible(browser.execute_script(LOOK_JS), scheme, "reports")
        screenshot(browser, f"reports-{scheme}", whole_page=True)


def test_an_unreachable_database_is_a_banner(browser: Any) -> None:
    with serving() as url:
        open_page(browser, url + "/reports")
        assert "Database unreachable" in browser.find_element("id", "reports-status").text
