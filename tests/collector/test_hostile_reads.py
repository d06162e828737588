"""Hostile reads (issue 16): every bad request to the read API is a 4xx with the reason, never a 500
(NUL bytes anywhere in the URL, time bounds that overflow), and the work of one request is bounded (a
statement timeout answered with 503, a time budget shared by a request's statements, a limit on the
points of a response, bucket widths rounded to what the rollups hold). The collector runs on
127.0.0.1; every request has a timeout."""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from gpuscope.collector.store.columns import GPU_METRIC_KEYS
from tests.alerts.telemetry import add_node
from tests.processes import RunningCollector, running_collector

API = "/api/v1"
METRICS_16 = sorted(GPU_METRIC_KEYS)[:16]


def get(collector: RunningCollector, path: str, params: Any = None, timeout: float = 30) -> httpx.Response:
    return httpx.get(f"{collector.url}{API}/{path}", params=params, timeout=timeout)


# Each string parameter of the read routes, with a NUL byte in it (12 as found in review, and more).
NUL_URLS = [
    "series?node=a%00b&metric=util_pct",
    "series?cluster=c%00&node=n&metric=util_pct",
    "series?uuid=%00&metric=util_pct",
    "series?job=j%00&metric=util_pct",
    "series?node=n&metric=util_pct%00",
    "jobs?user=%00",
    "events?kind=x%00id",
    "events?cluster=%00",
    "events?node=%00",
    "nics/series?node=%00",
    "nics/series?node=n&cluster=%00",
    "stragglers?job=%00",
    "heatmap?metric=util%00",
    "jobs/a%00b",
    "alerts?state=%00",
    "fleet?%00=1",
    "fleet?x=%00",
]


@pytest.mark.parametrize("url", NUL_URLS)
def test_a_nul_byte_anywhere_in_the_url_is_422(collector: RunningCollector, url: str) -> None:
    response = get(collector, url)
    assert response.status_code == 422, response.text[:300]
    assert "NUL" in response.json()["detail"]


OVERFLOWING = [
    # Year 9999 at -14:00 is year 10000 in UTC; year 1 at +14:00 is year 0.
    {"start": "9999-12-30T00:00:00-14:00", "end": "9999-12-31T23:00:00-14:00"},
    {"start": "0001-01-01T00:00:00+14:00", "end": "0001-01-02T00:00:00+14:00"},
    {"start": "9999-12-30T00:00:00+00:00", "end": "9999-12-31T00:00:00+00:00"},
    {"start": "0001-01-01T00:00:00Z", "end": "0001-01-02T00:00:00Z"},
    {"start": "1969-12-31T00:00:00Z", "end": "1970-01-01T01:00:00Z"},
]
TIMED_ROUTES = [
    ("heatmap", {}),
    ("series", {"node": "n1", "metric": "util_pct"}),
    ("rack-power", {}),
    ("nics/series", {"node": "n1"}),
    ("jobs", {}),
    ("stragglers", {}),
    ("events", {}),
]


@pytest.mark.parametrize("bounds", OVERFLOWING)
def test_time_bounds_out_of_range_are_422(collector: RunningCollector, bounds: dict[str, str]) -> None:
    add_node(collector.dsn, "n1", gpus=1, ports=1)
    for path, params in TIMED_ROUTES:
        response = get(collector, path, {**params, **bounds})
        assert response.status_code == 422, (path, response.text[:300])
        assert "between 1970-01-01" in response.json()["detail"], (path, response.text[:300])


@pytest.fixture
def slow_reads(dsn: str) -> Iterator[RunningCollector]:
    with running_collector(dsn, read_statement_timeout_s=0.5) as collector:
        yield collector


def test_a_read_past_the_statement_timeout_is_503(slow_reads: RunningCollector) -> None:
    add_node(slow_reads.dsn, "n1", gpus=2)
    with psycopg.connect(slow_reads.dsn) as conn:  # holds the lock until the block ends
        conn.execute("LOCK TABLE gpu IN ACCESS EXCLUSIVE MODE")
        began = time.monotonic()
        response = get(slow_reads, "fleet", timeout=20)
        took = time.monotonic() - began
    assert response.status_code == 503, response.text[:300]
    assert "statement timeout" in response.json()["detail"] and "0.5 s" in response.json()["detail"]
    assert took < 5, f"answered after {took:.1f} s"
    assert get(slow_reads, "fleet").status_code == 200, "the pool's connections are fine afterwards"


def test_the_statements_of_one_request_share_one_budget(
    slow_reads: RunningCollector, monkeypatch: pytest.MonkeyPatch
) -> None:
    """16 metrics, each read taking 0.3 s (under the 0.5 s statement timeout): without a budget for the
    whole request it would take 4.8 s; with it the request stops at about 0.5 s."""
    module = importlib.import_module(
        "gpuscope.collector.query.heatmap"
    )  # the package re-exports a function by that name
    original = module._cells

    def slow_cells(conn: psycopg.Connection[Any], *args: Any) -> Any:
        conn.execute("SELECT pg_sleep(0.3)")
        return original(conn, *args)

    monkeypatch.setattr(module, "_cells", slow_cells)
    add_node(slow_reads.dsn, "n1", gpus=2)
    began = time.monotonic()
    response = get(slow_reads, "series", {"node": "n1", "metric": METRICS_16, "minutes": 60}, timeout=20)
    took = time.monotonic() - began
    assert response.status_code == 503, response.text[:300]
    assert took < 2.5, f"answered after {took:.1f} s"
    monkeypatch.setattr(module, "_cells", original)
    assert get(slow_reads, "series", {"node": "n1", "metric": METRICS_16, "minutes": 60}).status_code == 200


def test_too_many_points_is_422_with_the_count(collector: RunningCollector) -> None:
    add_node(collector.dsn, "n1", gpus=64)
    hour = {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T01:23:00Z"}  # 4,980 s
    asked = get(collector, "series", {"node": "n1", "metric": METRICS_16, **hour, "bucket_seconds": 1})
    assert asked.status_code == 422, asked.text[:300]
    detail = asked.json()["detail"]
    assert "5,099,520 points" in detail and "16 metrics x 64 GPUs x 4,980 buckets" in detail, detail
    assert "1,000,000" in detail
    fine = get(collector, "series", {"node": "n1", "metric": METRICS_16[:2], **hour, "bucket_seconds": 60})
    assert fine.status_code == 200, fine.text[:300]


def test_too_many_points_on_the_heatmap_and_nics_is_422(collector: RunningCollector) -> None:
    add_node(collector.dsn, "n1", gpus=256, ports=256)
    heat = get(collector, "heatmap", {"minutes": 83, "bucket_seconds": 1})
    assert heat.status_code == 422 and "points" in heat.json()["detail"], heat.text[:300]
    nics = get(collector, "nics/series", {"node": "n1", "minutes": 83, "bucket_seconds": 1})
    assert nics.status_code == 422 and "points" in nics.json()["detail"], nics.text[:300]
    assert get(collector, "heatmap", {"minutes": 60}).status_code == 200
    assert get(collector, "nics/series", {"node": "n1", "minutes": 60}).status_code == 200


@pytest.mark.parametrize(
    ("asked", "served"),
    [(59, 59), (60, 60), (61, 60), (90, 120), (119, 120), (3599, 3600), (3601, 3600), (5400, 7200), (86400, 86400)],
)
def test_a_bucket_is_rounded_to_the_unit_of_its_source(collector: RunningCollector, asked: int, served: int) -> None:
    """Under a minute: raw samples, any width. From a minute: whole minutes (the minute rollup). From an
    hour: whole hours (the hour rollup). A width off the minute would otherwise read raw rows only."""
    add_node(collector.dsn, "n1", gpus=1, ports=1)
    minutes = 600 if asked < 3600 else 60 * 24 * 30
    for path, params in (("series", {"node": "n1", "metric": "util_pct"}), ("heatmap", {}), ("rack-power", {}),
                         ("nics/series", {"node": "n1"})):  # fmt: skip
        response = get(collector, path, {**params, "minutes": minutes, "bucket_seconds": asked})
        assert response.status_code == 200, (path, response.text[:300])
        assert response.json()["bucket_seconds"] == served, path


def test_a_bucket_under_a_minute_is_for_short_ranges_only(collector: RunningCollector) -> None:
    add_node(collector.dsn, "n1", gpus=1)
    long = get(collector, "heatmap", {"minutes": 60 * 25, "bucket_seconds": 30})
    assert long.status_code == 422 and "under 60 s" in long.json()["detail"], long.text[:300]
    assert get(collector, "heatmap", {"minutes": 60 * 24, "bucket_seconds": 30}).status_code == 200


def test_reads_still_answer_while_one_is_cut_off(slow_reads: RunningCollector) -> None:
    """A request cut off by the timeout leaves the pool usable for the others at once."""
    add_node(slow_reads.dsn, "n1", gpus=1)
    results: list[int] = []
    with psycopg.connect(slow_reads.dsn) as conn:
        conn.execute("LOCK TABLE gpu IN ACCESS EXCLUSIVE MODE")
        threads = [
            threading.Thread(target=lambda: results.append(get(slow_reads, "fleet").status_code)) for _ in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
    assert results == [503] * 4
    assert httpx.get(slow_reads.url + "/healthz", timeout=10).status_code == 200
