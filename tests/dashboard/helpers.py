"""Dashboards on loopback for tests: as `gpuscope dashboard` builds one from its settings, or one over no
database for tests about requests rather than data (request bodies, logins)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from gpuscope.core.listen import free_loopback_port
from gpuscope.core.pools import open_read_pool
from gpuscope.dashboard.app import create_app
from gpuscope.dashboard.context import DashboardOptions
from gpuscope.dashboard.server import DashboardServer
from gpuscope.dashboard_process import DashboardSettings
from gpuscope.dashboard_process import build as build_dashboard
from tests.conftest import new_database, require_tool
from tests.processes import RunningCollector, running_collector


@contextlib.contextmanager
def running_dashboard(settings: DashboardSettings) -> Iterator[str]:
    """The dashboard `gpuscope dashboard` runs for `settings`, serving in this process: its base URL."""
    with build_dashboard(settings) as server:
        server.start()
        try:
            yield f"http://127.0.0.1:{server.port}"
        finally:
            server.stop()


@contextlib.contextmanager
def dashboard_over_collector(
    postgres: Any, load: Callable[[RunningCollector], None], **collector_options: Any
) -> Iterator[str]:
    """For browser tests: a collector over a fresh database of `postgres`, filled by `load`, and the
    dashboard over that database (changes such as silences through that collector): its base URL."""
    require_tool("chromium")
    require_tool("chromedriver")
    dsn = new_database(postgres)
    with running_collector(dsn, **collector_options) as collector:
        load(collector)
        settings = DashboardSettings(db=dsn, listen="127.0.0.1:0", collector_url=collector.url, refresh_ms=60_000)
        with running_dashboard(settings) as url:
            yield url


@contextlib.contextmanager
def dashboard_over_incident(postgres: Any, collector_url: str | None = None) -> Iterator[str]:
    """For browser tests: the dashboard over a fresh database holding incident_cluster.py (the shipped
    rules evaluated by the real engine); `collector_url` set, every alert gets its "Silence this" button."""
    from tests.dashboard import incident_cluster

    require_tool("chromium")
    require_tool("chromedriver")
    dsn = new_database(postgres)
    incident_cluster.load(dsn)
    settings = DashboardSettings(db=dsn, listen="127.0.0.1:0", collector_url=collector_url, refresh_ms=60_000)
    with running_dashboard(settings) as url:
        yield url


@contextlib.contextmanager
def serving(options: DashboardOptions | None = None, users: dict[str, str] | None = None) -> Iterator[str]:
    """The dashboard's base URL, served as `gpuscope dashboard` serves it. Its database is a port where
    nothing listens: these requests never reach it, and no database has to be made for them."""
    dsn = f"postgresql://nobody:x@127.0.0.1:{free_loopback_port()}/none"
    pool = open_read_pool(dsn, max_size=1, timeout=1.0, wait=False)
    server = DashboardServer(create_app(pool, options, users), "127.0.0.1", 0)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()
        pool.close()


def jobs_table(browser: Any) -> dict[str, dict[str, Any]]:
    """The jobs page's table as the browser shows it: job id -> {header: cell element}."""
    table = browser.find_element("id", "jobs")
    headers = [th.text.rstrip(" ▲▼") for th in table.find_elements("css selector", "th")]
    rows = {}
    for tr in table.find_elements("css selector", "tbody tr"):
        cells = tr.find_elements("css selector", "td")
        rows[cells[0].text] = dict(zip(headers, cells, strict=True))
    return rows
