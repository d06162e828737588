"""Usage accounting against hand-computed figures: two hours of 10 s samples on two GPUs, three jobs.

- GPU 0 (H100), job j1 (alice, account a1, partition p1), held for the two hours. Minutes 0-49: utilisation
  100 %, SM activity 50 %, tensor 20 %; minutes 50-119: all 0, a 70-minute idle run across the hour's end.
  Its energy counter grows 4,000 J per sample (400 W) and restarts at minute 30, reading 2,000 J then.
- GPU 1 (A100, no counter, no SM activity): 100 W, utilisation 2 % throughout. Job j2 (bob) holds it for
  minutes 15-45 (a 30-minute idle run: waste), job j3 (bob) for minutes 60-80 (20 minutes: a pause).
"""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from gpuscope.collector.query.jobstats import job_report
from gpuscope.collector.query.timerange import TimeRange
from gpuscope.collector.query.usage import Rates, usage_report
from gpuscope.collector.store import partitions, rollups, usage
from tests.processes import RunningCollector

STEP = 10
J_PER_STEP = 4000.0


def _base() -> datetime:
    """An hour boundary far enough back that both hours are settled and final."""
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    return now - timedelta(hours=9)


def _seed(dsn: str, base: datetime) -> None:
    async def prepare() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            days = {(base + timedelta(hours=h)).date() for h in range(-1, 4)}
            await partitions.ensure(conn, days)

    asyncio.run(prepare())
    with psycopg.connect(dsn) as conn:
        node = conn.execute(
            "INSERT INTO node (cluster, name, rack) VALUES ('c', 'n1', 'r1') RETURNING node_id"
        ).fetchone()
        g0, g1 = (
            conn.execute(
                "INSERT INTO gpu (node_id, gpu_index, uuid, model, pci_bus_id) VALUES (%s, %s, %s, %s, '-')"
                " RETURNING gpu_id",
                (node[0], i, f"GPU-{i}", model),
            ).fetchone()[0]
            for i, model in enumerate(("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"))
        )
        rows: list[tuple[Any, ...]] = []
        for k in range(720):
            ts = base + timedelta(seconds=k * STEP)
            minute = k // 6
            busy = minute < 50
            energy = J_PER_STEP * k if k < 180 else J_PER_STEP * (k - 180) + 2000.0
            rows.append((ts, g0, 100.0 if busy else 0.0, 50.0 if busy else 0.0, 20.0 if busy else 0.0, 400.0,
                         energy, 1000 + k))  # fmt: skip
            rows.append((ts, g1, 2.0, None, None, 100.0, None, 5000))
        with conn.cursor().copy(
            "COPY gpu_sample (ts, gpu_id, util_pct, sm_active_pct, tensor_active_pct, power_w, energy_j,"
            " fb_used_bytes, up) FROM STDIN"
        ) as copy:
            for row in rows:
                copy.write_row((*row, True))
        conn.execute(
            "INSERT INTO rollup_dirty_minute (bucket) SELECT generate_series(%s::timestamptz, %s, interval '1 minute')",
            (base, base + timedelta(minutes=119)),
        )
        allocations = [
            ("j1", "alice", "a1", "p1", g0, 0, 120),
            ("j2", "bob", "a2", "p1", g1, 15, 45),
            ("j3", "bob", "a2", "p2", g1, 60, 80),
        ]
        for job, user, account, partition, gpu, lo, hi in allocations:
            conn.execute(
                "INSERT INTO job_allocation (job_id, username, account, partition, node_id, gpu_id, started_at,"
                " last_seen, ended_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (job, user, account, partition, node[0], gpu, base + timedelta(minutes=lo),
                 base + timedelta(minutes=hi), base + timedelta(minutes=hi)),
            )  # fmt: skip

    async def roll() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            while await rollups.roll_up(conn):
                pass
            await usage.update_usage(conn, keep=timedelta(days=1))

    asyncio.run(roll())


@pytest.fixture
def seeded(collector: RunningCollector) -> tuple[str, datetime]:
    base = _base()
    _seed(collector.dsn, base)
    return collector.dsn, base


RATES = Rates(currency="EUR", prices=(("*h100*", 2.0),), grid_g_per_kwh=500.0)


def test_report_by_user_matches_hand_computed_figures(seeded: tuple[str, datetime]) -> None:
    dsn, base = seeded
    with psycopg.connect(dsn) as conn:
        report = usage_report(conn, TimeRange(base, base + timedelta(hours=2)), "user", RATES)
    rows = {r.key: r for r in report.rows}
    alice, bob = rows["alice"].figures, rows["bob"].figures
    counter_j = 719 * J_PER_STEP - 2000  # every step from the first sample to the last, less the restart's loss
    assert math.isclose(alice.gpu_hours_allocated, 2.0)
    assert math.isclose(alice.gpu_hours_active, 50 / 60 * 0.5), "SM activity, not utilisation"
    assert alice.active_basis == "sm_active"
    assert math.isclose(alice.gpu_hours_tensor_active, 50 / 60 * 0.2)
    assert math.isclose(alice.gpu_hours_idle, 70 / 60), "the idle run crosses the hour: both hours count it"
    assert math.isclose(alice.energy_kwh, counter_j / 3.6e6)
    assert alice.energy_from_counter == pytest.approx(1.0)
    assert math.isclose(alice.cost or 0, 4.0)
    assert math.isclose(alice.co2_kg, counter_j / 3.6e6 * 0.5)
    assert math.isclose(bob.gpu_hours_allocated, 0.5 + 20 / 60)
    assert math.isclose(bob.gpu_hours_idle, 0.5), "30 idle minutes are waste; 20 are a pause"
    assert bob.active_basis == "util"
    assert math.isclose(bob.gpu_hours_active, (0.5 + 20 / 60) * 0.02)
    assert math.isclose(bob.energy_kwh, 100 * 50 * 60 / 3.6e6), "no counter: mean power x time held"
    assert bob.cost is None and math.isclose(bob.unpriced_gpu_hours, 0.5 + 20 / 60)
    assert rows["bob"].jobs == 2 and report.jobs == 3
    assert math.isclose(report.totals.gpu_hours_allocated, 2.5 + 20 / 60)
    assert math.isclose(report.totals.cost or 0, 4.0)
    assert report.currency == "EUR"


def test_report_groups_by_each_dimension_and_adds_up(seeded: tuple[str, datetime]) -> None:
    dsn, base = seeded
    span = TimeRange(base + timedelta(minutes=5), base + timedelta(minutes=100))  # the window asked, not widened
    with psycopg.connect(dsn) as conn:
        reports = {by: usage_report(conn, span, by, RATES) for by in ("account", "partition", "model", "job", "user")}
    assert (reports["job"].start, reports["job"].end) == (span.start, span.end)
    assert {r.key for r in reports["partition"].rows} == {"p1", "p2"}
    assert {r.key for r in reports["job"].rows} == {"j1", "j2", "j3"}
    j3 = next(r for r in reports["job"].rows if r.key == "j3")
    assert (j3.user, j3.account, j3.partition) == ("bob", "a2", "p2")
    for report in reports.values():
        for figure in ("gpu_hours_allocated", "gpu_hours_active", "gpu_hours_idle", "energy_kwh", "co2_kg"):
            summed = sum(getattr(r.figures, figure) for r in report.rows)
            assert math.isclose(summed, getattr(report.totals, figure), rel_tol=1e-9), (report.by, figure)


def test_carbon_follows_a_loaded_grid_series_hour_by_hour(seeded: tuple[str, datetime]) -> None:
    dsn, base = seeded
    with psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO grid_intensity (ts, g_per_kwh) VALUES (%s, 100)", (base + timedelta(hours=1),))
        conn.commit()
        alice = next(r for r in usage_report(conn, TimeRange(base, base + timedelta(hours=2)), "user", RATES).rows
                     if r.key == "alice")  # fmt: skip
    first_hour = 359 * J_PER_STEP - 2000  # the second hour's first minute holds the step across the boundary
    second_hour = 360 * J_PER_STEP
    assert math.isclose(alice.figures.co2_kg, (first_hour * 500 + second_hour * 100) / 3.6e6 / 1000)


def test_job_report_per_gpu(seeded: tuple[str, datetime]) -> None:
    dsn, _ = seeded
    with psycopg.connect(dsn) as conn:
        j1 = job_report(conn, "j1", RATES)
        j2 = job_report(conn, "j2", RATES)
        assert job_report(conn, "no-such-job", RATES) is None
    assert j1 is not None and j2 is not None
    assert (j1.user, j1.account, j1.partition, j1.gpus, j1.end is not None) == ("alice", "a1", "p1", 1, True)
    (gpu,) = j1.per_gpu
    assert (gpu.node, gpu.gpu) == ("n1", 0)
    assert math.isclose(gpu.util_mean_pct or 0, 100 * 50 / 120)
    assert math.isclose(gpu.tensor_active_mean_pct or 0, 20 * 50 / 120)
    assert math.isclose(gpu.power_mean_w or 0, 400.0)
    assert gpu.mem_max_bytes == 1000 + 719
    assert math.isclose(gpu.energy_kwh, (719 * J_PER_STEP - 2000) / 3.6e6)
    assert math.isclose(j1.figures.gpu_hours_idle, 70 / 60)
    assert math.isclose(j2.figures.gpu_hours_allocated, 0.5) and math.isclose(j2.figures.gpu_hours_idle, 0.5)
    assert j2.figures.cost is None and j2.per_gpu[0].mem_max_bytes == 5000


def test_hours_are_computed_once_final_and_again_when_due(seeded: tuple[str, datetime]) -> None:
    dsn, base = seeded

    async def again(now: datetime) -> int:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            return await usage.update_usage(conn, keep=timedelta(days=1), now=now)

    with psycopg.connect(dsn) as conn:
        hours = conn.execute(
            "SELECT bucket, final FROM usage_hour WHERE bucket <= %s ORDER BY 1", (base + timedelta(hours=1),)
        ).fetchall()
    assert hours == [(base, True), (base + timedelta(hours=1), True)]
    later = datetime.now(UTC)
    assert asyncio.run(again(later)) <= 1, "final hours are not computed again; at most the running hour is"


def test_one_replica_computes_at_a_time(seeded: tuple[str, datetime]) -> None:
    dsn, _ = seeded

    async def update() -> int:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            return await usage.update_usage(conn, keep=timedelta(days=1))

    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("DELETE FROM usage_hour")
        other.execute("SELECT pg_advisory_lock(%s)", (usage.USAGE_LOCK_KEY,))  # another replica at work
        assert asyncio.run(update()) == 0
        other.execute("SELECT pg_advisory_unlock(%s)", (usage.USAGE_LOCK_KEY,))
    assert asyncio.run(update()) > 2, "every hour since the first allocation is due again"
