"""Read-path latency: 24 h of 10 s samples for 1,024 GPUs (8.8 M rows) loaded into a private PostgreSQL
through the same binary COPY and rollup maintenance as ingest, then the dashboard's two heavy
queries timed through the query layer: the heatmap of every GPU over 6 h at 1-minute buckets, and
power per rack over 24 h."""

from __future__ import annotations

import asyncio
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg

from gpuscope.collector import query
from gpuscope.collector.store import partitions, rollups
from gpuscope.collector.store.copy_binary import CopyColumn, encode
from gpuscope.collector.store.migrate import migrate
from gpuscope.core.embedded_pg import throwaway_postgres

NODES, GPUS_PER_NODE, RACKS = 128, 8, 32
STEP_S = 10
HOURS = 24
RUNS = 20


def run() -> dict[str, Any]:
    with throwaway_postgres("gpuscope-bench-query-") as pg:
        migrate(pg.dsn)
        now = datetime.now(UTC).replace(microsecond=0)
        load_started = time.perf_counter()
        rows = _load(pg.dsn, now)
        rolled = asyncio.run(_roll_up_all(pg.dsn, now))
        load_s = time.perf_counter() - load_started
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
            six_hours = query.TimeRange(now - timedelta(hours=6), now)
            day = query.TimeRange(now - timedelta(hours=HOURS), now)
            heatmap = _timed(lambda: query.heatmap(conn, "util_pct", six_hours, 60))
            power = _timed(lambda: query.rack_power(conn, day, query.bucket_for(day)))
            check = query.heatmap(conn, "util_pct", six_hours, 60)
    return {
        "gpus": NODES * GPUS_PER_NODE,
        "rows_loaded": rows,
        "minutes_rolled_up": rolled,
        "load_seconds": round(load_s, 1),
        "heatmap_cells": int(check.values.size),
        "heatmap_ms_p50": round(statistics.median(heatmap), 1),
        "heatmap_ms_p95": round(_p95(heatmap), 1),
        "rack_power_ms_p50": round(statistics.median(power), 1),
        "rack_power_ms_p95": round(_p95(power), 1),
    }


def _load(dsn: str, now: datetime) -> int:
    rng = np.random.default_rng(1)
    start = now - timedelta(hours=HOURS)
    stamps = np.arange(start.timestamp(), now.timestamp(), STEP_S)
    gpus = NODES * GPUS_PER_NODE
    with psycopg.connect(dsn) as conn:
        for n in range(NODES):
            node_id = conn.execute(
                "INSERT INTO node (cluster, name, rack) VALUES ('bench', %s, %s) RETURNING node_id",
                (f"node-{n:03d}", f"rack-{n * RACKS // NODES:02d}"),
            ).fetchone()[0]  # type: ignore[index]
            for g in range(GPUS_PER_NODE):
                conn.execute(
                    "INSERT INTO gpu (node_id, gpu_index, uuid, model, pci_bus_id) VALUES (%s, %s, %s, 'H100', '-')",
                    (node_id, g, f"GPU-{n:03d}-{g}"),
                )
        conn.commit()

        async def make_partitions() -> None:
            async with await psycopg.AsyncConnection.connect(dsn) as aconn, aconn.transaction():
                await partitions.ensure(
                    aconn, {partitions.day_of(float(t)) for t in stamps[:: 8640 // 4]} | {now.date()}
                )

        asyncio.run(make_partitions())
        gpu_ids = np.arange(1, gpus + 1)
        per_chunk = max(1, 200_000 // gpus)
        for lo in range(0, len(stamps), per_chunk):
            ts = np.repeat(stamps[lo : lo + per_chunk], gpus)
            n = len(ts)
            busy = rng.uniform(0, 100, n)
            data = encode(
                [
                    CopyColumn("timestamptz", ts),
                    CopyColumn("int4", np.tile(gpu_ids, n // gpus)),
                    CopyColumn("bool", np.ones(n, dtype=bool)),
                    CopyColumn("float4", np.rint(busy)),
                    CopyColumn("float4", busy * 0.8),
                    CopyColumn("float4", busy * 0.5),
                    CopyColumn("float4", 70 + busy * 6),
                    CopyColumn("float4", 30 + busy * 0.5),
                    CopyColumn("float4", np.full(n, 1980.0)),
                ]
            )
            with conn.cursor().copy(
                "COPY gpu_sample (ts, gpu_id, up, util_pct, sm_active_pct, tensor_active_pct, power_w, temp_c,"
                " sm_clock_mhz) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.write(data)
            conn.commit()
        conn.execute(
            "INSERT INTO rollup_dirty_minute SELECT generate_series(date_bin('1 minute', %s::timestamptz, 'epoch'),"
            " %s::timestamptz, interval '1 minute') ON CONFLICT DO NOTHING",
            (start, now),
        )
        conn.commit()
    return len(stamps) * gpus


async def _roll_up_all(dsn: str, now: datetime) -> int:
    total = 0
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while done := await rollups.roll_up(conn, now + timedelta(hours=1)):
            total += done
    return total


def _timed(run_query: Any) -> list[float]:
    run_query()  # warm the cache: the dashboard asks the same every few seconds
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        run_query()
        times.append((time.perf_counter() - started) * 1000)
    return times


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[18]
