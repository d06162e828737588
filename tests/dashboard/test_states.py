"""What the dashboard says when there is nothing to show or no database to ask, its optional login,
and its behaviour at 8,192 GPUs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psycopg
import pytest

from gpuscope.bench.browser import console_errors, open_page, screenshot
from gpuscope.core.listen import free_loopback_port
from gpuscope.core.pools import open_read_pool
from gpuscope.dashboard import data
from gpuscope.dashboard.app import create_app
from gpuscope.dashboard.auth import BasicAuthError, hash_password, read_users
from gpuscope.dashboard.context import DashboardOptions, read_rack_budgets
from gpuscope.dashboard.server import DashboardServer
from tests.alerts.telemetry import ensure_partitions


def serve(pool: Any, users: dict[str, str] | None = None, refresh_ms: int = 2000) -> DashboardServer:
    server = DashboardServer(create_app(pool, DashboardOptions(refresh_ms=refresh_ms), users), "127.0.0.1", 0)
    server.start()
    return server


@pytest.fixture
def empty_dashboard(dsn: str) -> Iterator[str]:
    pool = open_read_pool(dsn, max_size=2)
    server = serve(pool)
    yield f"http://127.0.0.1:{server.port}"
    server.stop()
    pool.close()


def test_an_empty_store_says_so(empty_dashboard: str, browser: Any) -> None:
    for path, expected in (("/", "No data yet"), ("/jobs", "No jobs in this range"), ("/alerts", "No alert is firing"),
                           ("/node/nowhere", "No node 'nowhere'"), ("/jobs/none", "No job 'none'"),
                           ("/power", "No power readings"), ("/nope", "No page at /nope")):  # fmt: skip
        open_page(browser, empty_dashboard + path)
        assert expected in browser.find_element("id", "page").text + _annotations(browser), path
        assert console_errors(browser) == [], path
    screenshot(browser, "empty-overview")


def test_an_unreachable_database_is_a_message_not_a_traceback(browser: Any) -> None:
    port = free_loopback_port()  # nothing listens there
    pool = open_read_pool(f"postgresql://nobody:x@127.0.0.1:{port}/none", max_size=1, timeout=1.0, wait=False)
    server = serve(pool, refresh_ms=10_000)  # each refresh waits out the pool's timeout
    try:
        for path in ("/", "/heatmap", "/jobs", "/alerts", "/node/n1"):
            open_page(browser, f"http://127.0.0.1:{server.port}{path}", timeout=30)
            assert "Database unreachable" in browser.find_element("id", "page").text, path
            assert "Traceback" not in browser.page_source
            assert console_errors(browser) == [], path
        screenshot(browser, "database-unreachable")
    finally:
        server.stop()
        pool.close()


def _annotations(browser: Any) -> str:
    return " ".join(
        browser.execute_script(
            "return Array.from(document.querySelectorAll('.js-plotly-plot'))"
            ".flatMap(g => ((g.layout || {}).annotations || []).map(a => a.text));"
        )
    )


def test_basic_auth_guards_every_request(dsn: str, tmp_path: Path) -> None:
    users_file = tmp_path / "users"
    users_file.write_text(f"# operators\nada:{hash_password('correct horse', iterations=1000)}\n")
    users = read_users(users_file)
    pool = open_read_pool(dsn, max_size=2)
    server = serve(pool, users)
    base = f"http://127.0.0.1:{server.port}"
    try:
        refused = httpx.get(base + "/")
        assert refused.status_code == 401 and refused.headers["WWW-Authenticate"].startswith("Basic")
        assert httpx.get(base + "/_dash-layout").status_code == 401, "callbacks and assets too"
        assert httpx.get(base + "/", auth=("ada", "wrong")).status_code == 401
        assert httpx.get(base + "/", auth=("bob", "correct horse")).status_code == 401
        assert httpx.get(base + "/", auth=("ada", "correct horse")).status_code == 200
    finally:
        server.stop()
        pool.close()
    for bad, reason in (("ada:plain\n", "expected 'user:pbkdf2_sha256"), ("# nobody\n", "lists no users")):
        users_file.write_text(bad)
        with pytest.raises(BasicAuthError, match=reason):
            read_users(users_file)


def test_rack_budgets_file(tmp_path: Path) -> None:
    path = tmp_path / "budgets.yaml"
    path.write_text("rack-00: 40\nprod/rack-01: 35.5\n")
    assert read_rack_budgets(path) == {"rack-00": 40.0, "prod/rack-01": 35.5}
    for bad in ("rack-00: -1\n", "rack-00: lots\n", "- rack-00\n"):
        path.write_text(bad)
        with pytest.raises(ValueError):
            read_rack_budgets(path)


def test_8192_gpus_come_back_as_node_rows_within_the_cell_budget(dsn: str) -> None:
    ensure_partitions(dsn)
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO node (cluster, name, rack) SELECT 'big', 'node-' || lpad(n::text, 4, '0'),"
            " 'rack-' || lpad((n / 32)::text, 2, '0') FROM generate_series(0, 1023) n"
        )
        conn.execute(
            "INSERT INTO gpu (node_id, gpu_index, uuid, model, pci_bus_id)"
            " SELECT node_id, g, 'GPU-' || node_id || '-' || g, 'H100', '-' FROM node, generate_series(0, 7) g"
        )
        conn.execute(
            "INSERT INTO gpu_sample (ts, gpu_id, up, util_pct, power_w, power_limit_w)"
            " SELECT now() - make_interval(secs => s * 10), gpu_id, true, (gpu_id % 100)::real, 500, 700"
            " FROM gpu, generate_series(0, 89) s"
        )
    pool = open_read_pool(dsn, max_size=2)
    try:
        grid = data.load_grid(pool, "util_pct", "15m", "auto")
        assert grid.level == "node" and len(grid.rows) == 1024 and all(r.gpus == 8 for r in grid.rows)
        assert grid.cells <= 200_000
        assert data.load_grid(pool, "util_pct", "15m", "gpu").level == "node", "GPU rows would be 1.5 M cells"
        assert len(data.load_grid(pool, "util_pct", "15m", "rack").rows) == 32
        # No GPU here reports SM activity: its grid, and the overview's, are utilisation's (one rule, data.py).
        fallen_back = data.load_grid(pool, "sm_active_pct", "15m", "rack")
        assert fallen_back.metric == "util_pct" and len(fallen_back.rows) == 32
        assert np.nanmax(fallen_back.values) > 0, "utilisation's readings, not an empty SM grid"
        assert data.load_overview(pool, "15m").heatmap.metric == "util_pct"
        power = data.load_power(pool, "15m", {"rack-00": 100.0})
        assert power.budget_kw[0] == 100.0, "a configured budget wins"
        assert power.budget_kw[1] == pytest.approx(32 * 8 * 0.7), "else the GPUs' power limits"
        assert power.current_kw[1] == pytest.approx(32 * 8 * 0.5)
    finally:
        pool.close()
