"""The usage report answers the window asked, to the minute (issue 38, item 5): over tests/reports/
window_telemetry.py's night, windows off the hour (21:13 to 00:13), of one hour off the hour, inside one hour
and of whole hours, each against figures computed here by hand; and where the minute rollups of an edge are
past their retention, the report counts that edge's whole hour and says which."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import datetime

import psycopg
import pytest

from gpuscope.collector.query.timerange import TimeRange
from gpuscope.collector.query.usage import Dimension, UsageReport, usage_report
from gpuscope.core.embedded_pg import EmbeddedPostgres
from tests.conftest import new_database
from tests.reports.window_telemetry import RATES, at, drop_minutes_before, seed

KWH = 3.6e6  # joules
MIN = 60.0  # seconds


@pytest.fixture(scope="module")
def night(postgres: EmbeddedPostgres) -> Iterator[tuple[str, datetime]]:
    dsn = new_database(postgres)
    yield dsn, seed(dsn)


def report(dsn: str, start: datetime, end: datetime, by: Dimension = "user") -> UsageReport:
    with psycopg.connect(dsn) as conn:
        return usage_report(conn, TimeRange(start, end), by, RATES)


def check(found: UsageReport, key: str, **expected: float) -> None:
    row = next((r for r in found.rows if r.key == key), None)
    assert row is not None, f"no row {key!r}: {[r.key for r in found.rows]}"
    figures = row.figures.as_json() | {"jobs": row.jobs}
    for name, value in expected.items():
        assert math.isclose(figures[name], value, rel_tol=1e-9, abs_tol=1e-9), (key, name, figures[name], value)


def test_a_window_off_the_hour_counts_its_minutes_only(night: tuple[str, datetime]) -> None:
    dsn, base = night
    start, end = base + at(21, 13), base + at(0, 13)  # 3 hours, across midnight
    found = report(dsn, start, end)
    # alice: 4 GPUs x 3 h held. GPU 0 idle 21:13-21:40 (27 min of a 60-minute run: waste), busy the other 153
    # minutes; GPUs 1-3 busy 180 minutes each at SM activity 60 %, tensor 10 %, 400 W (idle: 100 W).
    busy_min = 153 + 3 * 180
    check(
        found,
        "alice",
        gpu_hours_allocated=12.0,
        gpu_hours_idle=27 / 60,
        gpu_hours_active=busy_min / 60 * 0.6,
        gpu_hours_tensor_active=busy_min / 60 * 0.1,
        energy_kwh=(27 * MIN * 100 + busy_min * MIN * 400) / KWH,
        cost=12.0 * 2.0,
        co2_kg=(27 * MIN * 100 + busy_min * MIN * 400) / KWH * 0.5,
        jobs=1,
    )
    # bob: short 21:13-21:40 (27 min) and inside 22:20-22:50 (30 min), both idle runs of 30 minutes or more,
    # utilisation 2 % (no SM activity), 100 W, an A100 without a price; carol's late job (00:20) is after it.
    check(
        found,
        "bob",
        gpu_hours_allocated=57 / 60,
        gpu_hours_idle=57 / 60,
        gpu_hours_active=57 / 60 * 0.02,
        energy_kwh=57 * MIN * 100 / KWH,
        unpriced_gpu_hours=57 / 60,
        jobs=2,
    )
    assert [r.key for r in found.rows] == ["alice", "bob"] and found.jobs == 3
    assert (found.start, found.end, found.hours_only) == (start, end, ()), "the window asked, not widened"
    assert math.isclose(found.totals.gpu_hours_allocated, 12.0 + 57 / 60)
    # Whole hours come from usage_1h: 22:00-00:00 is what the hours say, and the parts add up to the window.
    hours = report(dsn, base + at(22), base + at(0))
    assert hours.hours_only == ()
    check(hours, "alice", gpu_hours_allocated=8.0, gpu_hours_idle=0.0, gpu_hours_active=8.0 * 0.6)
    check(hours, "bob", gpu_hours_allocated=0.5, gpu_hours_idle=0.5, jobs=1)
    parts = [report(dsn, base + at(21, 13), base + at(22)), hours, report(dsn, base + at(0), base + at(0, 13))]
    for figure in ("gpu_hours_allocated", "gpu_hours_active", "gpu_hours_idle", "energy_kwh", "co2_kg"):
        summed = sum(getattr(p.totals, figure) for p in parts)
        assert math.isclose(summed, getattr(found.totals, figure), rel_tol=1e-9), figure


def test_a_one_hour_window_counts_one_hour(night: tuple[str, datetime]) -> None:
    dsn, base = night
    found = report(dsn, base + at(21, 13), base + at(22, 13), by="job")
    # wide: 4 GPU-hours; GPU 0 idle 27 minutes, busy 33; GPUs 1-3 busy 60 minutes each.
    check(
        found,
        "wide",
        gpu_hours_allocated=4.0,
        gpu_hours_idle=27 / 60,
        gpu_hours_active=(33 + 180) / 60 * 0.6,
        energy_kwh=(27 * MIN * 100 + (33 + 180) * MIN * 400) / KWH,
        cost=8.0,
    )
    check(found, "short", gpu_hours_allocated=27 / 60, gpu_hours_idle=27 / 60)
    assert [r.key for r in found.rows] == ["wide", "short"], "inside starts at 22:20, late at 00:20"
    assert (found.start, found.end) == (base + at(21, 13), base + at(22, 13))


def test_a_window_inside_one_hour(night: tuple[str, datetime]) -> None:
    dsn, base = night
    found = report(dsn, base + at(22, 10), base + at(22, 40), by="job")
    check(found, "wide", gpu_hours_allocated=2.0, gpu_hours_idle=0.0, gpu_hours_active=1.2)
    # inside holds the A100 for 20 of these minutes: a part of a 30-minute idle run, so waste.
    check(found, "inside", gpu_hours_allocated=20 / 60, gpu_hours_idle=20 / 60, energy_kwh=20 * MIN * 100 / KWH)


def test_an_edge_past_the_minute_retention_counts_its_whole_hour_and_says_so(postgres: EmbeddedPostgres) -> None:
    dsn = new_database(postgres)
    base = seed(dsn)
    drop_minutes_before(dsn, base + at(21, 30))
    start, end = base + at(21, 13), base + at(0, 13)
    found = report(dsn, start, end)
    # 21:00-22:00 as usage_1h counted it: 4 GPU-hours, GPU 0 idle 21:00-21:40; then 22:00-00:00 (8 GPU-hours,
    # all busy) and 00:00-00:13 from the minutes (4 x 13 minutes, busy).
    busy_min = (20 + 180) + 8 * 60 + 4 * 13
    check(
        found,
        "alice",
        gpu_hours_allocated=4.0 + 8.0 + 4 * 13 / 60,
        gpu_hours_idle=40 / 60,
        gpu_hours_active=busy_min / 60 * 0.6,
    )
    check(found, "bob", gpu_hours_allocated=(35 + 30) / 60, gpu_hours_idle=(35 + 30) / 60, jobs=2)
    assert [(s.start, s.end) for s in found.hours_only] == [(base + at(21), base + at(22))]
    assert (found.start, found.end) == (base + at(21), end), "the start moves to the hour it counts"
    # A window whose edges still have their minutes is counted to the minute as before.
    later = report(dsn, base + at(21, 45), end)
    assert later.hours_only == () and later.start == base + at(21, 45)
    check(later, "alice", gpu_hours_allocated=4 * (15 + 120 + 13) / 60)
