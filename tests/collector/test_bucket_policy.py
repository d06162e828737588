"""One bucket policy (collector/query/buckets.py) for the read API and the dashboard: the same width
and the same source for the same window. Buckets of several minutes are read as the minute rollup's
rows and widened in memory, by the API as by the dashboard, and the answer stays the exact mean of the
samples that reading the wide buckets in SQL gives."""

from __future__ import annotations

import importlib
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import numpy as np
import psycopg
import pytest
from psycopg_pool import ConnectionPool

from gpuscope.collector import query
from gpuscope.collector.query import buckets, cells
from gpuscope.dashboard import data
from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, Snapshot
from gpuscope.exporter.wire import Origin
from tests.collector.helpers import push_binary
from tests.collector.three_hours import HOURS, T0, roll_up, sample_three_hours
from tests.processes import RunningCollector

# the module, not the function query/__init__.py exports under its name
heatmap = importlib.import_module("gpuscope.collector.query.heatmap")


def test_the_source_follows_the_width() -> None:
    assert [buckets.source_of(b) for b in (15, 59, 60, 90, 120, 3599, 3600, 7200, 5400)] == [
        "raw", "raw", "minute", "raw", "minute", "raw", "hour", "hour", "minute",
    ]  # fmt: skip
    day = query.last(86400)
    assert buckets.read_width(600, day, series=64) == 60, "several minutes: minute rows, widened"
    assert buckets.read_width(600, day, series=4096) == 600, "too many minute cells: regrouped in SQL"
    assert buckets.read_width(60, day, series=64) == 60
    assert buckets.read_width(3600, day, series=64) == 3600, "whole hours: the hour rollup"


def test_the_api_and_the_dashboard_choose_the_same_way() -> None:
    six_hours = query.last(6 * 3600)
    assert buckets.chart_width(six_hours) == 120
    assert buckets.chart_width(six_hours, data.HEATMAP_MAX_COLUMNS, prefer_rollups=True) == 120
    hour = query.last(3600)
    assert buckets.chart_width(hour) == 15, "the API's default hour stays as it was"
    assert buckets.chart_width(hour, data.HEATMAP_MAX_COLUMNS, prefer_rollups=True) == 60, "the dashboard's"


@pytest.mark.parametrize(
    ("seconds", "requested", "words"),
    [
        (86400 * 30, 60, "bucket_seconds=60 gives more than 5000 buckets over this range"),
        (36 * 3600, 30, "bucket_seconds=30: a bucket under 60 s reads raw samples, over at most 24 hours"),
    ],
)
def test_a_width_that_cannot_be_served_says_why(seconds: int, requested: int, words: str) -> None:
    with pytest.raises(buckets.BadBucket, match=words):
        buckets.asked_bucket(query.last(seconds), requested)
    assert buckets.asked_bucket(query.last(3600), 90) == 120, "rounded to the minute rollup's unit"


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """Two GPUs sampled every 20 s for three hours, one of them skipping some samples (so that minutes
    hold different numbers of samples and a mean of minute means would differ from the exact mean),
    rolled up to minutes and hours."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        sample_three_hours(connection)
        roll_up(dsn, T0 + timedelta(hours=HOURS + 1))
        yield connection


def wide_in_sql(conn: psycopg.Connection[Any], window: query.TimeRange, bucket_s: int) -> np.ndarray:
    """The heatmap as it was read before the policy: the wide buckets regrouped in SQL over every tier."""
    found = cells.fetch_cells(conn, *cells.cells_query("util_pct", window, bucket_s, cells.rollup_splits(conn)))
    times = window.buckets(bucket_s)
    values = np.full((2, len(times)), np.nan)
    columns = np.rint((found.epoch - times[0].timestamp()) / bucket_s).astype(int)
    values[found.gpu_id - 1, columns] = found.value
    return values


def test_several_minutes_are_read_as_minute_rows_and_stay_exact(
    conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    window = query.TimeRange(T0 + timedelta(seconds=200), T0 + timedelta(hours=HOURS))  # the first bucket part-way
    read: list[timedelta] = []
    fetch = heatmap.fetch_cells

    def spy(connection: Any, statement: Any, params: dict[str, Any], counted: bool = False) -> cells.Cells:
        read.append(params["bucket"])
        return fetch(connection, statement, params, counted)

    monkeypatch.setattr(heatmap, "fetch_cells", spy)
    for bucket_s in (120, 600, 900):
        read.clear()
        got = query.heatmap(conn, "util_pct", window, bucket_s)
        assert read == [timedelta(minutes=1)], f"{bucket_s} s buckets read from the minute rows"
        expected = wide_in_sql(conn, window, bucket_s)
        np.testing.assert_allclose(got.values, expected, rtol=1e-12, err_msg=f"{bucket_s} s buckets: exact means")
        assert np.isfinite(got.values).all()
    read.clear()
    query.heatmap(conn, "util_pct", window, 3600)
    assert read == [timedelta(hours=1)], "whole hours: the hour rollup, regrouped in SQL"


def test_series_reads_the_same_way(conn: psycopg.Connection[Any]) -> None:
    window = query.TimeRange(T0, T0 + timedelta(hours=HOURS))
    got = query.series(conn, ["util_pct", "power_w"], window, 600, [1, 2])
    np.testing.assert_allclose(got.values["util_pct"], wide_in_sql(conn, window, 600), rtol=1e-12)
    np.testing.assert_allclose(got.values["power_w"], [[301.0] * 18, [302.0] * 18])


GPUS = [GpuIdentity(i, f"GPU-{uuid.uuid4()}", "H100", f"00:{i:02x}") for i in range(4)]


def test_the_api_heatmap_reads_the_rollup_and_answers_as_the_dashboard(collector: RunningCollector) -> None:
    """Six hours of history, every 30 s, one GPU missing some samples; rolled up. The API's heatmap
    over it (120-s buckets, as the dashboard's) equals the wide buckets read in SQL (its answer before
    this policy) and the dashboard's grid of the same window."""
    end = datetime.fromtimestamp(time.time() // 3600 * 3600 - 3600, UTC)
    start = end - timedelta(hours=6)
    stamps = np.arange(start.timestamp(), end.timestamp(), 30.0)
    snapshots = [
        Snapshot(
            ts=float(t),
            gpus=tuple(
                GpuReading(g, True, {"util_pct": float((i * 7 + g.index * 13) % 100), "power_w": 500.0})
                for g in GPUS
                if g.index != 3 or i % 5
            ),
            ports=(),
        )
        for i, t in enumerate(stamps)
    ]
    push_binary(collector, Origin("c", "r1", "n1", "sim", str(uuid.uuid4())), 1, snapshots)
    roll_up(collector.dsn, datetime.now(UTC))
    key = f"{start:%Y-%m-%dT%H:%M}..{end:%Y-%m-%dT%H:%M}"
    response = httpx.get(f"{collector.url}/api/v1/heatmap", params={"range": key}, timeout=30)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["bucket_seconds"] == 120
    api = np.array([[np.nan if v is None else v for v in row] for row in answer["values"]])
    window = query.TimeRange(start, end)
    with psycopg.connect(collector.dsn) as conn:
        uuids = [gpu["uuid"] for gpu in answer["gpus"]]
        gpu_ids = [conn.execute("SELECT gpu_id FROM gpu WHERE uuid = %s", (u,)).fetchone()[0] for u in uuids]  # type: ignore[index]
        found = cells.fetch_cells(conn, *cells.cells_query("util_pct", window, 120, cells.rollup_splits(conn)))
        assert buckets.read_width(120, window, len(gpu_ids)) == 60, "the API's heatmap is read from minute rows"
    before = np.full(api.shape, np.nan)
    row_of = {gpu_id: i for i, gpu_id in enumerate(gpu_ids)}
    first = window.buckets(120)[0].timestamp()
    for gpu_id, epoch, value in zip(found.gpu_id, found.epoch, found.value, strict=True):
        before[row_of[int(gpu_id)], round((epoch - first) / 120)] = value
    np.testing.assert_allclose(api, before, rtol=1e-12, err_msg="the answer the wide SQL read gave")
    with ConnectionPool(collector.dsn, min_size=1, max_size=1) as pool:
        grid = data.load_grid(pool, "util_pct", key, "gpu")
    assert grid.bucket_s == 120
    dashboard = {row.gpu_id: values for row, values in zip(grid.rows, grid.values, strict=True)}
    np.testing.assert_allclose(api, np.array([dashboard[gpu_id] for gpu_id in gpu_ids]), rtol=1e-12)
