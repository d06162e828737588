"""The Health page after a real dry run of the health loop (the default policy, as `gpuscope demo` runs it),
in real headless Chromium: the nodes it would drain are unhealthy and marked "would drain (dry run)", none
counts as drained, none is refused for the others' would-be drains; and node names never wrap."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from gpuscope.bench.browser import console_errors, open_page, screenshot
from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.dashboard_process import DashboardSettings
from gpuscope.health.loop import HealthLoop
from gpuscope.health.policy import HealthPolicy
from tests.conftest import new_database, require_tool
from tests.dashboard.helpers import running_dashboard
from tests.health.helpers import Telemetry, at

SICK = ("node-000", "node-010")  # as in the demo: with 16 nodes the default policy allows one out at a time
NARROW = (900, 1000)  # a laptop's half screen: the nodes table is squeezed
AROUND = f"{at(-3600):%Y-%m-%dT%H:%M}..{at(3600):%Y-%m-%dT%H:%M}"  # the audit trail's range: the dry run's hour


@pytest.fixture(scope="module")
def site(postgres: EmbeddedPostgres) -> Iterator[str]:
    require_tool("chromium")
    require_tool("chromedriver")
    dsn = new_database(postgres)
    with psycopg.connect(dsn, autocommit=True) as conn:
        telemetry = Telemetry(conn)
        nodes = {f"node-{i:03d}": telemetry.node(f"node-{i:03d}") for i in range(16)}
        for name in SICK:
            telemetry.event(nodes[name], telemetry.gpus(nodes[name], 8)[2], 100, "xid", 79)

    async def dry_run() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            health = HealthLoop(HealthPolicy())  # the defaults: dry run, no scheduler
            for seconds in (140, 170, 200):
                await health.cycle(conn, at(seconds))

    asyncio.run(dry_run())
    with running_dashboard(DashboardSettings(db=dsn, listen="127.0.0.1:0", refresh_ms=60_000)) as url:
        yield url


def text(element: Any) -> str:
    return str(element.get_attribute("textContent")).strip()


def test_nodes_a_dry_run_would_drain_are_unhealthy_marked_and_none_is_drained(site: str, browser: Any) -> None:
    open_page(browser, site + "/health")
    count = {key: text(browser.find_element("id", f"health-{key}-value")) for key in ("unhealthy", "drained")}
    assert count == {"unhealthy": "2", "drained": "0"}
    rows = browser.find_elements("css selector", "#health-nodes-table > tbody > tr")
    cells = {
        text(row.find_element("css selector", "td")): row.find_elements("css selector", ":scope > td") for row in rows
    }
    assert sorted(cells) == list(SICK)
    for name in SICK:
        state, reason = cells[name][1], cells[name][3]
        assert text(state) == "unhealthy would drain (dry run)"
        badge = state.find_element("css selector", ".state-dry-run")
        assert "nothing was drained" in badge.get_attribute("title") and "would run: no scheduler configured" in (
            badge.get_attribute("title")
        )
        assert text(reason).startswith("would drain (dry run: nothing drained): XID 79"), text(reason)
    assert "drain refused" not in browser.find_element("id", "page").text
    screenshot(browser, "health-dry-run", whole_page=True)
    assert console_errors(browser) == []


def test_node_names_never_wrap(site: str, browser: Any) -> None:
    browser.set_window_size(*NARROW)
    try:
        open_page(browser, site + "/health?range=" + AROUND)
        lines = browser.execute_script(
            "return [...document.querySelectorAll('#health-nodes-table td:first-child a,"
            " #health-transitions-table td:nth-child(2) a, #health-actions-table td:nth-child(2) a')]"
            ".map(a => [a.textContent, a.getClientRects().length])"
        )
        assert len(lines) >= 6, lines  # both nodes in each of the three tables
        assert [name for name, rects in lines if rects != 1] == [], lines
        screenshot(browser, "health-dry-run-narrow", whole_page=True)
    finally:
        browser.set_window_size(1400, 1000)
