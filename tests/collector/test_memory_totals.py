"""A GPU's memory size for the top of its chart: the newest its recent samples carried, found without
reading a day of samples for a GPU that never reports one."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from gpuscope.collector.query.memory_totals import NEWEST_SAMPLES, memory_totals
from tests.collector.test_partitions import maintain

GIB = 1 << 30
# The module, not the function the query package names the same
STATEMENT = importlib.import_module("gpuscope.collector.query.memory_totals")._SQL


def _samples(dsn: str, gpu_id: int, sizes: Sequence[int | None], every_s: int = 10) -> None:
    """One sample per size, taken while up, the last one newest (a few seconds ago)."""
    now = datetime.now(UTC)
    with psycopg.connect(dsn) as conn:
        for i, size in enumerate(sizes):
            conn.execute(
                "INSERT INTO gpu_sample (ts, gpu_id, up, fb_total_bytes) VALUES (%s, %s, true, %s)",
                (now - timedelta(seconds=every_s * (len(sizes) - i)), gpu_id, size),
            )


def test_the_newest_size_a_gpu_reported_and_none_for_a_gpu_that_stopped_long_ago(dsn: str) -> None:
    maintain(dsn, timedelta(days=30), datetime.now(UTC))  # today's and yesterday's partitions
    _samples(dsn, 1, [80 * GIB] * 5 + [None, 94 * GIB, None])  # the newest size is 94 GiB
    _samples(dsn, 2, [None] * 300)  # never reported one (an exporter without it)
    _samples(dsn, 3, [141 * GIB] + [None] * NEWEST_SAMPLES)  # reported it once, more than 60 samples ago
    _samples(dsn, 4, [141 * GIB] + [None] * (NEWEST_SAMPLES - 1))  # the oldest of its newest 60 counts
    assert memory_totals_of(dsn, [1, 2, 3, 4, 5]) == {1: 94 * GIB, 4: 141 * GIB}


def test_a_gpu_lost_for_longer_keeps_the_size_it_reported_while_up(dsn: str) -> None:
    maintain(dsn, timedelta(days=30), datetime.now(UTC))
    with psycopg.connect(dsn) as conn:  # up an hour ago, lost since
        for i in range(400):
            stamp = datetime.now(UTC) - timedelta(hours=1, seconds=-5 * i)
            up = i < 20
            conn.execute(
                "INSERT INTO gpu_sample (ts, gpu_id, up, fb_total_bytes) VALUES (%s, 9, %s, %s)",
                (stamp, up, 80 * GIB if up else None),
            )
    assert memory_totals_of(dsn, [9]) == {9: 80 * GIB}


def test_a_gpu_without_any_size_costs_its_newest_samples_not_its_day(dsn: str) -> None:
    maintain(dsn, timedelta(days=30), datetime.now(UTC))
    _samples(dsn, 7, [None] * 2000, every_s=1)
    with psycopg.connect(dsn) as conn:
        conn.execute("ANALYZE gpu_sample")
        plan = conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + STATEMENT, {"gpus": [7], "newest": NEWEST_SAMPLES}
        ).fetchone()
    assert plan is not None
    assert _rows_read(plan[0][0]["Plan"]) <= NEWEST_SAMPLES, "its newest samples read, not its 2,000"
    assert memory_totals_of(dsn, [7]) == {}


def _rows_read(node: dict[str, Any]) -> int:
    """Rows produced by the plan's scans of gpu_sample's partitions."""
    own = node.get("Actual Rows", 0) if "gpu_sample" in str(node.get("Relation Name", "")) else 0
    return own + sum(_rows_read(child) for child in node.get("Plans", []))


def memory_totals_of(dsn: str, gpu_ids: list[int]) -> dict[int, int]:
    with psycopg.connect(dsn) as conn:
        return memory_totals(conn, gpu_ids)
