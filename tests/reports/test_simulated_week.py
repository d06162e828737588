"""End to end: a simulated week (tests/reports/week.py) goes through a real collector, the maintenance
code rolls it up and accounts it, and the usage report must add up and agree with the figures computed
from the simulation's physics, within what sampling every 60 s can change (week.Allocation says why).

The expected figures never look at the collector's code: they are integrals over the simulated schedule.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg

from gpuscope.collector.store import rollups, usage
from tests.collector.helpers import post
from tests.processes import running_collector
from tests.reports import week as sim
from tests.reports.week import COUNTERLESS, HOUR, Allocation, Week, hour_energy_tol_j

BATCH_SAMPLES = 360  # six hours of one node per batch: 1,440 rows, about 175 kB of JSON
DIMENSIONS = ("user", "account", "partition", "namespace", "model", "job")
ADDITIVE = ("gpu_hours_allocated", "gpu_hours_active", "gpu_hours_idle", "energy_kwh", "co2_kg",
            "gpu_hours_measured", "gpu_hours_tensor_active", "unpriced_gpu_hours")  # fmt: skip
J_PER_KWH = 3.6e6
# The collector's maintenance loop wakes a minute after it starts and closes every allocation whose GPU was
# not reported for 5 minutes: all of a backfilled week's. Ingest must end before that, or continuing jobs
# would be cut at batch edges (losing a sample interval each) by something this test does not simulate.
INGEST_DEADLINE_S = 50.0


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


def _ingest(dsn: str, week: Week) -> int:
    rows = 0
    with running_collector(dsn) as collector:
        for batch in week.batches(BATCH_SAMPLES):
            response = post(collector, batch)
            assert response.status_code == 200, response.text
            assert response.json()["duplicate"] is False
            rows += response.json()["gpu_rows"]
    return rows


async def _maintain(dsn: str) -> tuple[int, int]:
    """What the collector's maintenance loop does, to the end: every settled minute, then every due hour."""
    minutes = hours = 0
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while done := await rollups.roll_up(conn):
            minutes += done
        while done := await usage.update_usage(conn, keep=timedelta(days=30)):
            hours += done
    return minutes, hours


def _reports(dsn: str, week: Week) -> dict[str, dict[str, Any]]:
    """The week's report by each dimension, and (as "restart") the restart hour's by job."""
    # A second collector only reads: its maintenance loop would not start within the few seconds this takes,
    # and none ran while this test's own maintenance did.
    params = {"start": _iso(week.first_ts - HOUR), "end": _iso(week.last_ts + HOUR)}
    out = {}
    with running_collector(dsn) as collector, httpx.Client(base_url=collector.url, timeout=30) as client:
        for by in DIMENSIONS:
            response = client.get("/api/v1/reports/usage", params={**params, "by": by})
            assert response.status_code == 200, response.text
            out[by] = response.json()
        hour = {"start": _iso(week.restart_hour), "end": _iso(week.restart_hour + HOUR), "by": "job"}
        response = client.get("/api/v1/reports/usage", params=hour)
        assert response.status_code == 200, response.text
        out["restart"] = response.json()
    return out


def _check_scenario(week: Week) -> None:
    """The week holds every case the report is checked on (they depend on the seed and hour alignment)."""
    assert {j.profile for j in week.jobs} == set(sim.PROFILES)
    assert {j.user for j in week.jobs} == set(sim.USERS)
    assert len({j.account for j in week.jobs}) == 3 and len({j.partition for j in week.jobs}) == 2
    assert {len(j.gpus) for j in week.jobs} == {1, 2, 3, 4}
    assert any((j.node, j.gpus) == (COUNTERLESS[0], (COUNTERLESS[1],)) for j in week.jobs)
    # An idle run that an hour's end cuts into two parts shorter than the idle rule's 30 minutes: the report
    # counts hours one at a time, and must still see the run whole.
    split = [
        (lo, hi)
        for a in week.allocations()
        for lo, hi in a.idle_runs()
        if (edge := math.ceil(lo / HOUR) * HOUR) < hi and max(edge - lo, hi - edge) < sim.IDLE_RUN
    ]
    assert split, "no idle run crosses an hour in two short parts"
    # In the restart hour, a reading after the restart not counted would be seen beyond the tolerance.
    gpu = week.gpu(*sim.RESTARTING)
    assert gpu.restart_at is not None
    reading = gpu.restart_at - sim.RESTART_AFTER_READING
    unseen = gpu.integral("power", gpu.restart_at, reading + sim.STEP)
    assert unseen > 2 * hour_energy_tol_j(week.restart_job, week.gpus, week.restart_hour, gpu.restart_at)


class Expected:
    """Truth and tolerance per group of allocations, in report units (GPU-hours, kWh)."""

    def __init__(self, allocations: list[Allocation]) -> None:
        self.allocated = sum(a.allocated_s for a in allocations) / HOUR
        self.allocated_tol = sum(a.allocated_tol_s for a in allocations) / HOUR
        self.idle = sum(a.idle_s for a in allocations) / HOUR
        self.idle_tol = sum(a.idle_tol_s for a in allocations) / HOUR
        self.energy = sum(a.energy_j for a in allocations) / J_PER_KWH
        self.energy_tol = sum(a.energy_tol_j for a in allocations) / J_PER_KWH
        self.active = sum(a.active_s for a in allocations) / HOUR
        self.active_tol = sum(a.active_tol_s for a in allocations) / HOUR
        self.jobs = len({a.job.id for a in allocations})


def _grouped(week: Week, key: str) -> dict[Any, Expected]:
    groups: dict[Any, list[Allocation]] = defaultdict(list)
    for a in week.allocations():
        groups[
            {"user": a.job.user, "account": a.job.account, "partition": a.job.partition, "job": a.job.id}[key]
        ].append(a)
    return {k: Expected(v) for k, v in groups.items()}


def _compare(problems: list[str], what: str, got: float, expected: float, tol: float) -> None:
    if not abs(got - expected) <= tol:
        problems.append(f"{what}: expected {expected:.4f} ± {tol:.4f}, got {got:.4f} (off by {got - expected:+.4f})")


def _check_sums(problems: list[str], report: dict[str, Any]) -> None:
    """Every row's figures add up to the totals (rows hold every job, each job in one row per dimension)."""
    by, rows, totals = report["by"], report["rows"], report["totals"]
    for key in ADDITIVE:
        got = math.fsum(row[key] for row in rows)
        if not math.isclose(got, totals[key], rel_tol=1e-9, abs_tol=1e-9):
            problems.append(f"by={by}: rows' {key} add up to {got!r}, totals say {totals[key]!r}")
    if sum(row["jobs"] for row in rows) != totals["jobs"]:
        problems.append(f"by={by}: rows' jobs add up to {sum(r['jobs'] for r in rows)}, totals say {totals['jobs']}")
    # A share of measured time: adds up once weighted by it.
    weighted = math.fsum(row["energy_from_counter"] * row["gpu_hours_measured"] for row in rows)
    if not math.isclose(weighted, totals["energy_from_counter"] * totals["gpu_hours_measured"], rel_tol=1e-9):
        problems.append(f"by={by}: rows' counter-measured hours {weighted!r} differ from the totals'")


def _check_restart_hour(problems: list[str], week: Week, report: dict[str, Any]) -> None:
    """The hour in which a GPU's counter restarts, held throughout by one job: sharp enough (unlike the
    whole week's per-allocation tolerance) to see a reading after the restart left out."""
    job, hour = week.restart_job, week.restart_hour
    row = next((r for r in report["rows"] if r["key"] == job.id), None)
    if row is None:
        problems.append(f"restart hour: no row for job {job.id}")
        return
    gpus = [week.gpu(job.node, i) for i in job.gpus]
    _compare(problems, f"restart hour, job {job.id} gpu_hours_allocated", row["gpu_hours_allocated"], len(gpus), 1e-9)
    restart = week.gpu(*sim.RESTARTING).restart_at
    expected = sum(g.integral("power", hour, hour + HOUR) for g in gpus) / J_PER_KWH
    tol = hour_energy_tol_j(job, week.gpus, hour, restart) / J_PER_KWH
    _compare(problems, f"restart hour, job {job.id} energy_kwh", row["energy_kwh"], expected, tol)
    _compare(problems, f"restart hour, job {job.id} energy_from_counter", row["energy_from_counter"], 1.0, 1e-9)


def test_a_simulated_week_adds_up(dsn: str) -> None:
    began = time.monotonic()
    week = sim.build(time.time())
    _check_scenario(week)

    rows = _ingest(dsn, week)
    ingested = time.monotonic()
    assert rows == 8 * week.samples
    assert ingested - began < INGEST_DEADLINE_S, f"ingest took {ingested - began:.0f} s"
    minutes, hours = asyncio.run(_maintain(dsn))
    maintained = time.monotonic()
    assert minutes >= week.samples  # every minute of the week was rolled up
    assert hours >= 7 * 24
    reports = _reports(dsn, week)
    print(
        f"\nsimulated week: {len(week.jobs)} jobs, {len(week.allocations())} allocations, {rows} rows;"
        f" ingest {ingested - began:.1f} s, maintenance {maintained - ingested:.1f} s ({minutes} minutes,"
        f" {hours} hours), reports {time.monotonic() - maintained:.1f} s"
    )

    problems = _problems(week, reports)
    assert not problems, "the usage report disagrees with the simulated week:\n" + "\n".join(problems)


def _problems(week: Week, reports: dict[str, dict[str, Any]]) -> list[str]:
    """Every way the reports disagree with the week (all of them, not the first: a pattern tells more)."""
    problems: list[str] = []
    fleet = Expected(week.allocations())
    for report in reports.values():
        _check_sums(problems, report)
    _check_restart_hour(problems, week, reports["restart"])
    totals = reports["user"]["totals"]
    _compare(problems, "fleet gpu_hours_allocated", totals["gpu_hours_allocated"], fleet.allocated, fleet.allocated_tol)
    _compare(problems, "fleet gpu_hours_idle", totals["gpu_hours_idle"], fleet.idle, fleet.idle_tol)
    _compare(problems, "fleet energy_kwh", totals["energy_kwh"], fleet.energy, fleet.energy_tol)
    _compare(problems, "fleet gpu_hours_active", totals["gpu_hours_active"], fleet.active, fleet.active_tol)
    if totals["jobs"] != len(week.jobs):
        problems.append(f"fleet jobs: expected {len(week.jobs)}, got {totals['jobs']}")
    # No grid series loaded: the documented default intensity, 480 g/kWh, applies to every hour.
    _compare(problems, "fleet co2_kg", totals["co2_kg"], totals["energy_kwh"] * 0.480, 1e-6)

    for dimension in ("user", "account", "partition", "job"):
        got = {row["key"]: row for row in reports[dimension]["rows"]}
        expected = _grouped(week, dimension)
        if set(got) != set(expected):
            problems.append(f"by={dimension}: keys {sorted(got)}, expected {sorted(expected)}")
        for key, want in expected.items():
            row = got.get(key)
            if row is None:
                continue
            what = f"{dimension}={key}"
            _compare(problems, f"{what} gpu_hours_allocated", row["gpu_hours_allocated"], want.allocated,
                     want.allocated_tol)  # fmt: skip
            _compare(problems, f"{what} gpu_hours_idle", row["gpu_hours_idle"], want.idle, want.idle_tol)
            _compare(problems, f"{what} energy_kwh", row["energy_kwh"], want.energy, want.energy_tol)
            _compare(problems, f"{what} gpu_hours_active", row["gpu_hours_active"], want.active, want.active_tol)
            if row["jobs"] != want.jobs:
                problems.append(f"{what} jobs: expected {want.jobs}, got {row['jobs']}")

    jobs = {row["key"]: row for row in reports["job"]["rows"]}
    for job in week.jobs:
        row = jobs.get(job.id)
        if row is None:
            continue
        if (row["user"], row["account"], row["partition"]) != (job.user, job.account, job.partition):
            problems.append(f"job {job.id}: attributed to {row['user']}/{row['account']}/{row['partition']}")
        # Sharper than the truth: as documented, an allocation runs from the first reading naming the job to
        # the first naming another or none, so the report's hours are those of the readings, exactly.
        documented = len(job.gpus) * (week.reading_at_or_after(job.end) - week.reading_at_or_after(job.start)) / HOUR
        _compare(problems, f"job {job.id} gpu_hours_allocated (readings)", row["gpu_hours_allocated"], documented, 1e-6)
        # Pauses of 10 and 20 minutes (the two 20-minute ones 4 busy minutes apart) are not idle.
        if job.profile == "pauses" and row["gpu_hours_idle"] != 0:
            problems.append(f"job {job.id} only paused, yet {row['gpu_hours_idle']:.4f} GPU-hours idle")
        # Energy on the GPU without a counter comes from power x time, the others' from their counters; a job's
        # GPUs are all held for the same readings, so the counters' share of its time is exact.
        counterless = job.node == COUNTERLESS[0] and COUNTERLESS[1] in job.gpus
        share = (len(job.gpus) - 1) / len(job.gpus) if counterless else 1.0
        _compare(problems, f"job {job.id} energy_from_counter", row["energy_from_counter"], share, 1e-9)

    # "Active" is SM activity on the H100s (they report it), utilisation on the A100s (they do not).
    basis = {row["key"]: row["active_basis"] for row in reports["model"]["rows"]}
    if basis != {sim.MODELS[0]: "sm_active", sim.MODELS[1]: "util"} or totals["active_basis"] != "mixed":
        problems.append(f"active_basis by model {basis}, overall {totals['active_basis']!r}")

    # The one-GPU job on the GPU without a counter: its energy can come from power alone.
    alone = next(j for j in week.jobs if (j.node, j.gpus) == (COUNTERLESS[0], (COUNTERLESS[1],)))
    if not jobs.get(alone.id, {}).get("energy_kwh"):
        problems.append(f"job {alone.id}, on the GPU without an energy counter alone, got no energy")
    return problems
