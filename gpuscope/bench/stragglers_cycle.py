"""The straggler watch's cycle at cluster scale, through the database: 10,000 GPUs (1,250 nodes of 8,
one InfiniBand port each) in 625 running jobs of two nodes, 5 s samples. The first cycle replays the
minutes loaded (as after a restart); then, cycle after cycle, one new 5 s bucket arrives and the watch
reads it, feeds every job's detector and stores what changed, as it does in production every 5 s.

The detectors' warm-up is shortened to one minute so that judging runs within the minutes loaded; the
rest of the detector is as shipped."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg

from gpuscope.bench.fleet_db import create_fleet
from gpuscope.collector.store import partitions
from gpuscope.collector.store.copy_binary import CopyColumn, encode
from gpuscope.collector.store.migrate import migrate
from gpuscope.core.embedded_pg import throwaway_postgres
from gpuscope.stragglers.detector import Settings
from gpuscope.stragglers.watch import StragglerWatch

NODES, GPUS_PER_NODE, NODES_PER_JOB = 1250, 8, 2
SAMPLE_S, HISTORY_MIN, CYCLES = 5, 3, 10


def run() -> dict[str, Any]:
    with throwaway_postgres("gpuscope-bench-straggler-cycle-") as pg:
        migrate(pg.dsn)
        now = datetime.fromtimestamp(time.time() // SAMPLE_S * SAMPLE_S, UTC)
        start = now - timedelta(minutes=HISTORY_MIN)
        rng = np.random.default_rng(3)
        with psycopg.connect(pg.dsn) as conn:
            _create(conn, pg.dsn, start, now + timedelta(seconds=SAMPLE_S * CYCLES))
            stamps = np.arange(start.timestamp(), now.timestamp(), SAMPLE_S)
            for t in stamps:
                _insert_bucket(conn, float(t), rng)
            conn.commit()
            conn.execute("ANALYZE")
        figures = asyncio.run(
            measure(pg.dsn, now, lambda loader, bucket: _insert_bucket(loader, bucket.timestamp(), rng))
        )
    return {"gpus": NODES * GPUS_PER_NODE, **figures, "replay_minutes": HISTORY_MIN}


Arrive = Callable[[psycopg.Connection[Any], datetime], None]


async def measure(dsn: str, now: datetime, arrive: Arrive, cycles: int = CYCLES) -> dict[str, Any]:
    """Times the watch over the jobs and samples in `dsn` (stored up to `now`): a first cycle that replays
    them, then `cycles` more, 5 s apart; before each, `arrive(conn, bucket)` stores what the exporters
    pushed for the 5 s bucket starting at `bucket` (or nothing, where they sample less often)."""
    watch = StragglerWatch(Settings(sample_s=SAMPLE_S, warmup_s=60.0))
    times = []
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        t0 = time.perf_counter()
        await watch.cycle(conn, now + timedelta(seconds=1))
        replay_s = time.perf_counter() - t0
        with psycopg.connect(dsn, autocommit=True) as loader:
            for i in range(cycles):
                # A new bucket arrives, which completes the one before it: the cycle reads that one.
                bucket = now + timedelta(seconds=SAMPLE_S * i)
                arrive(loader, bucket)
                t0 = time.perf_counter()
                await watch.cycle(conn, bucket + timedelta(seconds=1))
                times.append(time.perf_counter() - t0)
    fed = {job.cursor for job in watch.jobs.values()}
    return {
        "jobs": len(watch.jobs),
        "replay_s": round(replay_s, 2),
        "straggler_cycle_s": round(statistics.median(times), 3),
        "straggler_cycle_max_s": round(max(times), 3),
        "jobs_fed_to_the_last_bucket": len(fed) == 1,
    }


def _create(conn: psycopg.Connection[Any], dsn: str, start: datetime, end: datetime) -> None:
    create_fleet(conn, NODES, GPUS_PER_NODE, ports_per_node=1)
    conn.execute(
        "INSERT INTO job_allocation (job_id, username, node_id, gpu_id, started_at, last_seen)"
        " SELECT 'job-' || ((node_id - 1) / %s), 'bench', node_id, gpu_id, %s, %s FROM gpu",
        (NODES_PER_JOB, start, end),
    )
    conn.commit()

    async def make_partitions() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn, aconn.transaction():
            await partitions.ensure(aconn, {partitions.day_of(start.timestamp()), partitions.day_of(end.timestamp())})

    asyncio.run(make_partitions())


def _insert_bucket(conn: psycopg.Connection[Any], t: float, rng: np.random.Generator) -> None:
    """One 5 s sample of every GPU (a training job's activity, with noise) and of every port (counters
    that advance with the steps)."""
    gpus, ports = NODES * GPUS_PER_NODE, NODES
    columns = [
        CopyColumn("timestamptz", np.full(gpus, t)),
        CopyColumn("int4", np.arange(1, gpus + 1)),
        CopyColumn("bool", np.ones(gpus, dtype=bool)),
        CopyColumn("float4", rng.uniform(97, 100, gpus)),
        CopyColumn("float4", rng.normal(40, 1, gpus)),
        CopyColumn("float4", rng.normal(70, 1, gpus)),
        CopyColumn("float4", np.full(gpus, 1980.0)),
        CopyColumn("int8", np.zeros(gpus)),
    ]
    with conn.cursor().copy(
        "COPY gpu_sample (ts, gpu_id, up, util_pct, tensor_active_pct, sm_active_pct, sm_clock_mhz,"
        " clock_event_reasons) FROM STDIN (FORMAT BINARY)"
    ) as copy:
        copy.write(encode(columns))
    elapsed = t - 1.7e9
    port_columns = [
        CopyColumn("timestamptz", np.full(ports, t)),
        CopyColumn("int4", np.arange(1, ports + 1)),
        CopyColumn("int8", np.full(ports, elapsed * 2e9)),
        CopyColumn("int8", np.full(ports, elapsed * 1e5)),
        CopyColumn("float4", np.full(ports, 400.0)),
    ]
    with conn.cursor().copy(
        "COPY ib_port_sample (ts, port_id, xmit_bytes, xmit_wait, rate_gbps) FROM STDIN (FORMAT BINARY)"
    ) as copy:
        copy.write(encode(port_columns))
