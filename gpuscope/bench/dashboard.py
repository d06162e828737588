"""Dashboard speed: 24 h of 10 s samples for 1,024 GPUs (as `bench query` loads them) plus 64 running
jobs, the dashboard served on loopback, and headless Chromium opening each page three times: the time to
its first full render (every graph drawn, every table filled, no callback in flight), median and first.
Then the heatmap's update callback timed on the server side, as the page's refresh timer calls it."""

from __future__ import annotations

import asyncio
import statistics
import time
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg

from gpuscope.bench import query as query_bench
from gpuscope.bench.browser import chromium, load_breakdown, open_page
from gpuscope.collector.store.migrate import migrate
from gpuscope.core.embedded_pg import throwaway_postgres
from gpuscope.core.pools import open_read_pool
from gpuscope.dashboard.app import create_app
from gpuscope.dashboard.server import DashboardServer

PAGES = ("/", "/heatmap", "/power", "/jobs", "/jobs/job-07", "/node/node-042", "/alerts")
CALLBACK_RUNS = 10
VISITS = 3


def run() -> dict[str, Any]:
    with throwaway_postgres("gpuscope-bench-dashboard-") as pg:
        migrate(pg.dsn)
        now = datetime.now(UTC).replace(microsecond=0)
        started = time.perf_counter()
        rows = query_bench._load(pg.dsn, now)
        asyncio.run(query_bench._roll_up_all(pg.dsn, now))
        _add_jobs(pg.dsn)
        load_s = time.perf_counter() - started
        pool = open_read_pool(pg.dsn, max_size=4)
        server = DashboardServer(create_app(pool), "127.0.0.1", 0)
        server.start()
        base = f"http://127.0.0.1:{server.port}"
        try:
            renders, first_visits, cold_breakdown = _renders(base)
            callbacks = {key: _callback_ms(base, key) for key in ("1h", "6h", "24h")}
        finally:
            server.stop()
            pool.close()
    figures: dict[str, Any] = {
        "gpus": query_bench.NODES * query_bench.GPUS_PER_NODE,
        "rows_loaded": rows,
        "load_seconds": round(load_s, 1),
        "first_page_cold_s": renders.pop("cold"),
    }
    figures.update({f"first_page_cold_{key}": value for key, value in cold_breakdown.items()})
    figures["render_s"] = renders
    figures["render_s_max"] = max(renders.values())
    figures["render_s_first_visit"] = first_visits
    for key, times in callbacks.items():
        figures[f"heatmap_callback_ms_p50_{key}"] = round(statistics.median(times), 1)
        figures[f"heatmap_callback_ms_p95_{key}"] = round(statistics.quantiles(times, n=20)[18], 1)
    return figures


def _add_jobs(dsn: str) -> None:
    """64 jobs of 16 GPUs (two nodes each), running for the last two hours."""
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO job_allocation (job_id, username, node_id, gpu_id, started_at, last_seen)"
            " SELECT 'job-' || lpad(((node_id - 1) / 2)::text, 2, '0'), 'user' || (node_id % 7), node_id, gpu_id,"
            " now() - interval '2 hours', now() FROM gpu"
        )


def _renders(base: str) -> tuple[dict[str, float], dict[str, float], dict[str, Any]]:
    """Seconds to each page's first full render: the median of VISITS visits, and the first visit alone.
    Every visit is a fresh page load. The browser opens the overview once before (the Dash and Plotly
    bundles fetched into an empty cache): that figure is returned as "cold". A browser compiles a large
    script again on its second load and keeps the compiled code from the third on, so first visits pay
    for compiling Plotly once more; an operator's browser has long been past that, hence the median.
    Also where the cold visit's time went (browser.load_breakdown): script kB, slowest callback's server time.

    The cold visit starts from about:blank, as every other visit does: a freshly started Chromium's first
    navigation waits 0.35-0.55 s for its own processes before it asks for the page (measured: the page's
    performance.timeOrigin against the moment of driver.get), which is the browser starting, not the page
    loading; about:blank fetches nothing, so the cache stays empty. That wait is reported on its own as
    "browser_first_navigation_s", beside the cold figure rather than inside it."""
    visits: dict[str, list[float]] = {path: [] for path in PAGES}
    cold: dict[str, float] = {}
    with chromium() as driver:
        started = time.perf_counter()
        driver.get("about:blank")
        first_navigation_s = round(time.perf_counter() - started, 2)
        cold["cold"] = round(open_page(driver, base + PAGES[0], timeout=60), 2)
        breakdown: dict[str, Any] = {**load_breakdown(driver), "browser_first_navigation_s": first_navigation_s}
        for _ in range(VISITS):
            for path in PAGES:
                driver.get("about:blank")
                visits[path].append(open_page(driver, base + path, timeout=60))
    median = {path: round(statistics.median(times), 2) for path, times in visits.items()}
    first = {path: round(times[0], 2) for path, times in visits.items()}
    return {**cold, **median}, first, breakdown


def _callback_ms(base: str, range_key: str) -> list[float]:
    """Server time of the heatmap page's refresh callback (util, `range_key`, automatic rows)."""
    outputs = [
        {"id": "heatmap-status", "property": "children"},
        {"id": "heatmap-graph", "property": "figure"},
        {"id": "heatmap-targets", "property": "data"},
    ]
    inputs = [
        {"id": "refresh", "property": "n_intervals", "value": 1},
        {"id": "heatmap-metric", "property": "value", "value": "util_pct"},
        {"id": "heatmap-range", "property": "value", "value": range_key},
        {"id": "heatmap-level", "property": "value", "value": "auto"},
    ]
    payload = {
        "output": "..heatmap-status.children...heatmap-graph.figure...heatmap-targets.data..",
        "outputs": outputs,
        "inputs": inputs,
        "changedPropIds": ["refresh.n_intervals"],
    }
    times = []
    with httpx.Client(timeout=60) as client:
        client.post(f"{base}/_dash-update-component", json=payload).raise_for_status()  # warm
        for _ in range(CALLBACK_RUNS):
            started = time.perf_counter()
            client.post(f"{base}/_dash-update-component", json=payload).raise_for_status()
            times.append((time.perf_counter() - started) * 1000)
    return times
