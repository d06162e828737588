"""The usage report at cluster scale: 10,000 GPUs (two models) busy for 30 days with a site's job mix, as
usage_1h holds it (one row per hour, job and model), with an hourly grid intensity series and prices. Then
the report by each dimension over the 30 days, and the hourly accounting itself (compute_hour) over one
hour of minute rollups of the whole fleet, as the collectors' maintenance runs it."""

from __future__ import annotations

import asyncio
import io
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg

from gpuscope.bench.fleet_db import create_fleet
from gpuscope.collector.query.timerange import TimeRange
from gpuscope.collector.query.usage import DIMENSIONS, Rates, usage_report
from gpuscope.collector.store import usage
from gpuscope.collector.store.migrate import migrate
from gpuscope.core.embedded_pg import throwaway_postgres

GPUS_PER_NODE = 8
RUNS = 5
# Job sizes in GPUs and the share of GPUs each takes (big jobs hold most GPUs, small jobs are most jobs).
SIZES = (1, 2, 4, 8, 16, 32, 64)
GPU_SHARE = (0.06, 0.04, 0.10, 0.30, 0.20, 0.15, 0.15)
MEDIAN_JOB_H, MEAN_GAP_H = 6.0, 1.0
USERS, ACCOUNTS = 200, 40
RATES = Rates(currency="EUR", prices=(("H100", 2.5), ("A100", 1.2)), grid_g_per_kwh=400.0)


def run() -> dict[str, Any]:
    with throwaway_postgres("gpuscope-bench-reports-") as pg:
        return measure(pg.dsn)


def measure(dsn: str, gpus: int = 10_000, days: int = 30, seed: int = 3) -> dict[str, Any]:
    """Loads the month into `dsn` (an empty database; the schema is applied here) and times the reports."""
    migrate(dsn)
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start = now - timedelta(days=days)
    started = time.perf_counter()
    rows, jobs = _load(dsn, gpus, days, start, np.random.default_rng(seed))
    load_s = time.perf_counter() - started
    span = TimeRange(start, now)
    times: dict[str, list[float]] = {}
    with psycopg.connect(dsn) as conn:
        for by in DIMENSIONS:
            for _ in range(RUNS):
                t = time.perf_counter()
                report = usage_report(conn, span, by, RATES)
                times.setdefault(by, []).append(time.perf_counter() - t)
            assert report.rows, f"the report by {by} found nothing"
    p95 = {by: _p95(s) for by, s in times.items()}
    return {
        "gpus": gpus,
        "days": days,
        "jobs": jobs,
        "usage_rows": rows,
        "load_seconds": round(load_s, 1),
        "report_s_p50": {by: round(statistics.median(s), 3) for by, s in times.items()},
        "report_s_p95": {by: round(v, 3) for by, v in p95.items()},
        "report_s_worst_p95": round(max(p95.values()), 3),
        "target_s": 2.0,
        **_time_hour(dsn, gpus, now),
    }


def _p95(samples: list[float]) -> float:
    return float(np.percentile(samples, 95))


def _schedule(rng: np.random.Generator, gpus: int, hours: float) -> list[tuple[int, int, float, float]]:
    """(first GPU, GPUs, start hour, end hour) of every job: lanes of one job size, jobs back to back with gaps."""
    jobs, first = [], 0
    lanes = []
    for size, share in zip(SIZES, GPU_SHARE, strict=True):
        lanes += [size] * int(gpus * share // size)
    for size in lanes:
        t = float(rng.uniform(-MEDIAN_JOB_H, 0))  # the month starts mid-job
        while t < hours:
            length = float(rng.lognormal(np.log(MEDIAN_JOB_H), 1.0))
            jobs.append((first, size, max(t, 0.0), min(t + length, hours)))
            t += length + float(rng.exponential(MEAN_GAP_H))
        first += size
    return jobs


def _load(dsn: str, gpus: int, days: int, start: datetime, rng: np.random.Generator) -> tuple[int, int]:
    hours = days * 24
    jobs = _schedule(rng, gpus, hours)
    out, rows = io.StringIO(), 0
    for number, (first, size, lo, hi) in enumerate(jobs):
        user = int(rng.integers(USERS))
        model = "H100" if first < gpus * 0.7 else "A100"
        activity = float(rng.beta(4, 2))  # most jobs busy, some not
        idle = float(rng.beta(1, 8))
        kubernetes = user % 5 == 0  # a fifth of the users run on Kubernetes: a namespace, no account
        labels = (
            f"u{user:03d}\t\\N\t\\N\tteam-{user % ACCOUNTS:02d}"
            if kubernetes
            else f"u{user:03d}\tacct-{user % ACCOUNTS:02d}\t{'gpu' if size < 32 else 'large'}\t\\N"
        )
        for hour in range(int(lo), int(np.ceil(hi))):
            held = (min(hi, hour + 1) - max(lo, hour)) * 3600 * size
            at = (start + timedelta(hours=hour)).isoformat()
            out.write(
                f"{at}\tjob-{number}\t{model}\t{labels}\t{held / 3600:.4f}\t{held:.1f}\t{held * 0.99:.1f}"
                f"\t{held * activity * 0.8:.1f}\t{held * 0.99:.1f}\t{held * activity * 0.3:.1f}\t{held * 0.99:.1f}"
                f"\t{held * idle:.1f}\t{held * (100 + 500 * activity):.1f}\t{held * 0.99:.1f}\n"
            )
            rows += 1
    with psycopg.connect(dsn) as conn:
        with conn.cursor().copy(
            "COPY usage_1h (bucket, job_id, model, username, account, partition, namespace, gpus, allocated_s,"
            " measured_s, active_s, active_sm_s, tensor_s, tensor_measured_s, idle_s, energy_j, energy_counter_s)"
            " FROM STDIN"
        ) as copy:
            copy.write(out.getvalue())
        conn.execute(
            "INSERT INTO grid_intensity (ts, g_per_kwh) SELECT h, 300 + 150 * sin(extract(epoch FROM h) / 43200)"
            " FROM generate_series(%s::timestamptz, %s, interval '1 hour') AS h",
            (start, start + timedelta(hours=hours)),
        )
        conn.execute(
            "INSERT INTO usage_hour (bucket, computed_at, final) SELECT h, now(), true"
            " FROM generate_series(%s::timestamptz, %s, interval '1 hour') AS h",
            (start, start + timedelta(hours=hours - 1)),
        )
        create_fleet(conn, gpus // GPUS_PER_NODE, GPUS_PER_NODE, 0)
        conn.execute("UPDATE gpu SET model = 'A100' WHERE gpu_id > %s", (int(gpus * 0.7),))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return rows, len(jobs)


def _time_hour(dsn: str, gpus: int, now: datetime) -> dict[str, Any]:
    """compute_hour over the fleet's last hour: every GPU held (8-GPU jobs, one starting mid-hour per rack),
    with the minute rollups and energy readings of that hour and the 30 minutes around it."""
    hour = now - timedelta(hours=1)
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO job_allocation (job_id, username, account, node_id, gpu_id, started_at, last_seen, ended_at)"
            " SELECT 'now-' || node_id, 'u' || (node_id %% 200), 'acct', node_id, gpu_id,"
            "   CASE WHEN node_id %% 16 = 0 THEN %(hour)s + interval '20 minutes' ELSE %(hour)s - interval '1 day' END,"
            "   %(now)s, NULL FROM gpu",
            {"hour": hour, "now": now},
        )
        minutes = "FROM gpu, generate_series(%(lo)s::timestamptz, %(hi)s, interval '1 minute') AS m"
        params = {"lo": hour - timedelta(minutes=40), "hi": now + timedelta(minutes=30)}
        conn.execute(
            "INSERT INTO gpu_rollup_1m (bucket, gpu_id, samples, up_samples, util_sum, util_n, sm_active_sum,"  # noqa: S608 (constants)
            " sm_active_n, tensor_sum, tensor_n, power_sum, power_n, temp_sum, temp_n, sm_clock_sum, sm_clock_n)"
            " SELECT m, gpu_id, 6, 6, 6 * ((gpu_id * 7 + extract(minute FROM m)::int) %% 100), 6,"
            "   3 * ((gpu_id * 7) %% 100), 6, 60, 6, 2400, 6, 300, 6, 9000, 6 " + minutes,
            params,
        )
        conn.execute(
            "INSERT INTO gpu_energy_1m (bucket, gpu_id, first_j, last_j)"  # noqa: S608 (constants)
            " SELECT m, gpu_id, extract(epoch FROM m) * 400, extract(epoch FROM m) * 400 + 20000 " + minutes,
            params,
        )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")

    async def time_once() -> float:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            t = time.perf_counter()
            await usage.compute_hour(conn, hour, now)
            return time.perf_counter() - t

    seconds = [asyncio.run(time_once()) for _ in range(3)]
    with psycopg.connect(dsn) as conn:
        found = conn.execute(
            "SELECT count(*), sum(allocated_s) / 3600, sum(idle_s) / 3600, sum(energy_j) / 3.6e6 FROM usage_1h"
            " WHERE bucket = %s",
            (hour,),
        ).fetchone()
    assert found is not None and found[0] > 0, "the hour's accounting wrote nothing"
    return {
        "usage_hour_s": round(statistics.median(seconds), 2),
        "usage_hour_gpus": gpus,
        "usage_hour_rows": found[0],
        "usage_hour_gpu_hours": round(found[1], 1),
        "usage_hour_kwh": round(found[3], 1),
    }
