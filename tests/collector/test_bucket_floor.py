"""Buckets never narrower than the samples fill: a range sampled every 15 s (real sites: 10-30 s; the
demo's history) is never cut into 5-s buckets, four in five of them empty, which a heatmap draws as
stripes and a sum over racks as power swinging to nothing. Chosen widths only: one asked for stands."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import numpy as np
import psycopg

from gpuscope.collector import query
from gpuscope.dashboard import data
from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, Snapshot
from gpuscope.exporter.wire import Origin
from tests.collector.helpers import push_binary
from tests.processes import RunningCollector

GPUS = [GpuIdentity(i, f"GPU-{uuid.uuid4()}", "H100", f"00:{i:02x}") for i in range(4)]


def push(collector: RunningCollector, times: np.ndarray) -> None:
    snapshots = [
        Snapshot(
            ts=float(t), gpus=tuple(GpuReading(g, True, {"util_pct": 90.0, "power_w": 600.0}) for g in GPUS), ports=()
        )
        for t in times
    ]
    origin = Origin("c", "r1", "n1", "sim", str(uuid.uuid4()))
    push_binary(collector, origin, 1, snapshots)


def get(collector: RunningCollector, path: str, **params: Any) -> Any:
    response = httpx.get(f"{collector.url}/api/v1/{path}", params=params, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def inner_gaps(row: list[float | None]) -> int:
    """Empty buckets between the first and the last bucket with data."""
    filled = [i for i, v in enumerate(row) if v is not None]
    return sum(v is None for v in row[filled[0] : filled[-1] + 1]) if filled else 0


def test_a_range_sampled_every_15_s_gets_buckets_it_fills(collector: RunningCollector) -> None:
    now = time.time()
    push(collector, np.arange(now - 14 * 60, now, 15.0))
    heatmap = get(collector, "heatmap", minutes=15)
    assert heatmap["bucket_seconds"] >= 15
    assert all(inner_gaps(row) == 0 for row in heatmap["values"]), "no stripes"
    power = get(collector, "rack-power", minutes=15)
    assert power["bucket_seconds"] >= 15 and inner_gaps(power["watts"][0]) == 0
    asked = get(collector, "heatmap", minutes=15, bucket_seconds=5)
    assert asked["bucket_seconds"] == 5 and inner_gaps(asked["values"][0]) > 0, "a width asked for stands"
    with psycopg.connect(collector.dsn) as conn:
        window = query.last(15 * 60)
        assert data.rollup_bucket(conn, window, 180) >= 15, "the dashboard's choice too"
        assert min(data.rollup_buckets(conn, window, 180, 240)) >= 15, "every chart of a page"
        assert query.sample_spacing(conn, window) == 15.0


def test_fast_sampling_keeps_fine_buckets_and_history_sets_the_floor(collector: RunningCollector) -> None:
    now = time.time()
    push(collector, np.arange(now - 170, now, 1.0))
    assert get(collector, "heatmap", minutes=3)["bucket_seconds"] <= 2, "live data sampled every second"
    push(collector, np.arange(now - 14 * 60, now - 170, 15.0))  # older history, sampled every 15 s
    heatmap = get(collector, "heatmap", minutes=15)
    assert heatmap["bucket_seconds"] >= 15 and all(inner_gaps(row) == 0 for row in heatmap["values"])


def test_no_samples_leave_the_width_alone(collector: RunningCollector) -> None:
    with psycopg.connect(collector.dsn) as conn:
        window = query.TimeRange(datetime.now(UTC) - timedelta(minutes=3), datetime.now(UTC))
        assert query.sample_spacing(conn, window) is None
        assert query.fillable_bucket(conn, window, 1) == 1
