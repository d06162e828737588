"""The health cycle's evidence at cluster scale: 10,000 GPUs (1,250 nodes of 8) with 8 InfiniBand ports
per node, 10 s samples. Every GPU and port has the last 20 minutes (the window and the look-back before
it); the ones with something to show have 6 hours (a link flap rule's window): a few GPUs hot at normal
load, NVLinks recovering, uncorrectable ECC errors, pending remaps, lost GPUs; ports flapping every 2
hours and a few every 2 minutes lately; XIDs, and a week of stragglers with GPUs that straggle in two jobs.
Then find_evidence runs cycle after cycle over successive one-minute windows, as the health cycle does,
and once over the last 10 minutes (a cycle catching up after a restart)."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg

from gpuscope.bench import health_replay
from gpuscope.bench.fleet_db import create_fleet
from gpuscope.collector.store import partitions
from gpuscope.collector.store.columns import NULL_INT
from gpuscope.collector.store.copy_binary import CopyColumn, encode
from gpuscope.collector.store.migrate import migrate
from gpuscope.core.embedded_pg import throwaway_postgres
from gpuscope.health.evidence import find_evidence
from gpuscope.health.loop import HealthLoop
from gpuscope.health.policy import HealthPolicy

GPUS_PER_NODE, PORTS_PER_NODE = 8, 8
STEP_S = 10
LOOP_EVERY_S = HealthPolicy().every_s
RECENT_S, HISTORY_S = 20 * 60, 6 * 3600  # every device; the devices with something to show
CYCLE_S, CYCLES = 60, 10
SLOW_EVERY, FAST_EVERY, FAST_FROM_S = 720, 12, 600  # ports' flaps: samples apart; fast ones since (s ago)
# Hot GPUs slow from here, and some NVLinks start recovering: their rules fire in the cycles measured.
HOT_FROM_S, NVLINK_FROM_S = -20 * 60, 9 * 60


def run() -> dict[str, Any]:
    with throwaway_postgres("gpuscope-bench-health-") as pg:
        return {**measure(pg.dsn), **health_replay.measure(pg.dsn)}


def measure(dsn: str, nodes: int = 1250) -> dict[str, Any]:
    """Loads the fleet into `dsn` (an empty database; the schema is applied here) and times find_evidence."""
    migrate(dsn)
    now = datetime.fromtimestamp(time.time() // STEP_S * STEP_S, UTC)
    started = time.perf_counter()
    rows = _load(dsn, nodes, now)
    load_s = time.perf_counter() - started
    return {
        "gpus": nodes * GPUS_PER_NODE,
        "ports": nodes * PORTS_PER_NODE,
        "rows_loaded": rows,
        "load_seconds": round(load_s, 1),
        **asyncio.run(time_evidence(dsn, now)),
        **asyncio.run(time_loop(dsn, now)),
    }


async def time_loop(dsn: str, now: datetime, minutes: int = 5) -> dict[str, Any]:
    """The whole health cycle as the collector runs it (health/loop.py, dry run, the default policy):
    evidence over the window since the last cycle and its overlap for late pushes, stored once, then every
    node with news or out of health judged. The first cycle catches up on the loop's look-back; then the
    cycles of the last `minutes` are timed."""
    loop = HealthLoop(HealthPolicy())
    times = []
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        t0 = time.perf_counter()
        first = await loop.cycle(conn, now - timedelta(minutes=minutes))
        first_s = time.perf_counter() - t0
        at = now - timedelta(minutes=minutes)
        while at < now:
            at += timedelta(seconds=LOOP_EVERY_S)
            t0 = time.perf_counter()
            await loop.cycle(conn, at)
            times.append(time.perf_counter() - t0)
        states = await (await conn.execute("SELECT state, count(*) FROM health_node GROUP BY state")).fetchall()
    return {
        "health_cycle_every_s": LOOP_EVERY_S,
        "health_cycle_s": round(statistics.median(times), 3),
        "health_cycle_s_max": round(max(times), 3),
        "health_first_cycle_s": round(first_s, 3),
        "health_first_cycle_transitions": len(first.transitions),
        "health_states": {state: count for state, count in sorted(states)},
    }


async def time_evidence(dsn: str, now: datetime, cycles: int = CYCLES) -> dict[str, Any]:
    """find_evidence over each of the last `cycles` one-minute windows, then over all of them at once."""
    times, kinds = [], Counter[str]()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await find_evidence(conn, now - timedelta(seconds=2 * CYCLE_S), now)  # warm: plans, caches
        for i in range(cycles, 0, -1):
            until = now - timedelta(seconds=(i - 1) * CYCLE_S)
            t0 = time.perf_counter()
            found = await find_evidence(conn, until - timedelta(seconds=CYCLE_S), until)
            times.append((time.perf_counter() - t0) * 1000)
            kinds.update(e.kind for e in found)
        t0 = time.perf_counter()
        caught_up = await find_evidence(conn, now - timedelta(seconds=cycles * CYCLE_S), now)
        catch_up_ms = (time.perf_counter() - t0) * 1000
    return {
        "cycle_window_s": CYCLE_S,
        "cycle_ms_p50": round(statistics.median(times), 1),
        "cycle_ms_max": round(max(times), 1),
        "catch_up_window_s": cycles * CYCLE_S,
        "catch_up_ms": round(catch_up_ms, 1),
        "findings_by_kind": dict(sorted(kinds.items())),
        "findings_catch_up": len(caught_up),
    }


def _load(dsn: str, nodes: int, now: datetime) -> int:
    gpus, ports = nodes * GPUS_PER_NODE, nodes * PORTS_PER_NODE
    rng = np.random.default_rng(20)
    plan = _Plan(rng, gpus, ports)
    first = now - timedelta(seconds=HISTORY_S)
    with psycopg.connect(dsn) as conn:
        create_fleet(conn, nodes, GPUS_PER_NODE, PORTS_PER_NODE)
        conn.commit()
        asyncio.run(_partitions(dsn, {(first + timedelta(days=d)).date() for d in range(2)} | {now.date()}))
        ticks = np.arange(-HISTORY_S + STEP_S, 1, STEP_S)  # seconds from now
        old, recent = ticks[ticks <= -RECENT_S], ticks[ticks > -RECENT_S]
        rows = 0
        for stamps, gpu_ids, port_ids in ((old, plan.gpus_shown, plan.ports_shown), (recent, None, None)):
            for chunk in np.array_split(stamps, max(1, len(stamps) // 30)):
                rows += _copy_gpus(conn, now, chunk, plan, gpu_ids if gpu_ids is not None else np.arange(gpus))
                rows += _copy_ports(conn, now, chunk, plan, port_ids if port_ids is not None else np.arange(ports))
        _events_and_stragglers(conn, now, plan)
        conn.commit()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return rows


class _Plan:
    """Which devices show what (0-based positions; ids are position + 1, as create_fleet numbers them)."""

    def __init__(self, rng: np.random.Generator, gpus: int, ports: int) -> None:
        chosen = rng.permutation(gpus)
        count = max(1, gpus // 1000)
        self.hot = chosen[: 10 * count]  # 1%: slowed at normal load
        self.capped = chosen[10 * count : 20 * count]  # 1%: slowed at the power cap, no evidence
        self.nvlink = chosen[20 * count : 21 * count]  # a recovery every 3 minutes: crossed long ago
        self.nvlink_lately = chosen[21 * count : 22 * count]  # a recovery every 2 minutes, lately
        self.ecc = chosen[22 * count : 23 * count]
        self.pending = chosen[23 * count : 24 * count]
        self.lost = chosen[24 * count : 24 * count + max(1, count // 2)]
        self.repeat_stragglers = chosen[25 * count : 27 * count]  # in a second job, lately
        self.gpus_shown = np.sort(np.concatenate([self.hot, self.nvlink, self.nvlink_lately, self.ecc, self.pending]))
        flapping = rng.permutation(ports)
        self.slow_flaps = flapping[: 5 * count]  # down one sample every 2 hours
        self.fast_flaps = flapping[5 * count : 6 * count]  # down one sample every 2 minutes, lately
        self.ports_shown = np.sort(flapping[: 6 * count])
        self.gpus = gpus


def _copy_gpus(conn: psycopg.Connection[Any], now: datetime, ticks: np.ndarray, plan: _Plan, gpu: np.ndarray) -> int:
    t = np.repeat(ticks, len(gpu)).astype(float)
    g = np.tile(gpu, len(ticks))
    n = len(t)
    up = ~(np.isin(g, plan.lost) & (t >= -300))
    hot = np.isin(g, plan.hot) & (t >= HOT_FROM_S)
    capped = np.isin(g, plan.capped)
    power = np.where(hot, 300.0, np.where(capped, 695.0, 450.0 + (g % 100)))
    reasons = np.where(hot, 0x40, np.where(capped, 0x44, 0))
    ecc = (np.isin(g, plan.ecc) & (t >= -30 - (g % 540))).astype(np.int64)
    pending = (np.isin(g, plan.pending) & (t >= -420)).astype(np.int64)
    recoveries = np.where(np.isin(g, plan.nvlink), (t + HISTORY_S) // 180, 0)
    recoveries += np.where(np.isin(g, plan.nvlink_lately), np.maximum(0, (t + NVLINK_FROM_S) // 120 + 1), 0)
    recoveries = recoveries.astype(np.int64)
    crc = ((t + HISTORY_S) * 3).astype(np.int64)
    columns = [
        CopyColumn("timestamptz", now.timestamp() + t),
        CopyColumn("int4", g + 1),
        CopyColumn("bool", up),
        CopyColumn("float4", np.where(up, 80.0, np.nan)),
        CopyColumn("float4", np.where(up, power, np.nan)),
        CopyColumn("float4", np.where(up, 700.0, np.nan)),
        *(
            CopyColumn(pg_type, np.where(up, values, NULL_INT))
            for pg_type, values in (
                ("int8", reasons),
                ("int8", ecc),
                ("int8", np.zeros(n, dtype=np.int64)),
                ("int2", pending),
                ("int2", np.zeros(n, dtype=np.int64)),
                ("int8", recoveries),
                ("int8", crc),
            )
        ),
    ]
    with conn.cursor().copy(
        "COPY gpu_sample (ts, gpu_id, up, util_pct, power_w, power_limit_w, clock_event_reasons, ecc_uncorrected,"
        " ecc_corrected, remap_pending, remap_failure, nvlink_recovery_errors, nvlink_crc_errors)"
        " FROM STDIN (FORMAT BINARY)"
    ) as copy:
        copy.write(encode(columns))
    return n


def _copy_ports(conn: psycopg.Connection[Any], now: datetime, ticks: np.ndarray, plan: _Plan, port: np.ndarray) -> int:
    t = np.repeat(ticks, len(port)).astype(np.int64)
    p = np.tile(port, len(ticks))
    k = (t + HISTORY_S) // STEP_S  # sample number
    slow, fast = np.isin(p, plan.slow_flaps), np.isin(p, plan.fast_flaps) & (t > -FAST_FROM_S)
    phase = p % SLOW_EVERY
    down = (slow & (k % SLOW_EVERY == phase)) | (fast & (k % FAST_EVERY == phase % FAST_EVERY))
    downed = np.where(slow, (k - phase + SLOW_EVERY) // SLOW_EVERY, 0)
    downed += np.where(fast, (t + FAST_FROM_S) // (FAST_EVERY * STEP_S), 0)
    columns = [
        CopyColumn("timestamptz", (now.timestamp() + t).astype(float)),
        CopyColumn("int4", p + 1),
        CopyColumn("int2", np.where(down, 1, 4)),
        CopyColumn("int8", downed),
        CopyColumn("int8", np.zeros(len(t), dtype=np.int64)),
        CopyColumn("int8", k * 10**9),
    ]
    with conn.cursor().copy(
        "COPY ib_port_sample (ts, port_id, state, link_downed, link_error_recovery, xmit_bytes)"
        " FROM STDIN (FORMAT BINARY)"
    ) as copy:
        copy.write(encode(columns))
    return len(t)


def _events_and_stragglers(conn: psycopg.Connection[Any], now: datetime, plan: _Plan) -> None:
    repeat = [int(g) + 1 for g in plan.repeat_stragglers]
    # 40 XIDs over the last 10 minutes, application errors and hardware ones; each lost GPU's event.
    conn.execute(
        "INSERT INTO event (ts, node_id, gpu_id, kind, code) SELECT %s - make_interval(secs => (g.gpu_id * 7) %% 600),"
        " g.node_id, g.gpu_id, 'xid', (ARRAY[13, 31, 43, 48, 79, 94, 119])[1 + g.gpu_id %% 7]"
        " FROM gpu g WHERE g.gpu_id %% greatest(1, %s / 40) = 0",
        (now, plan.gpus),
    )
    conn.execute(
        "INSERT INTO event (ts, node_id, gpu_id, kind) SELECT %s - interval '300 seconds', node_id, gpu_id, 'gpu_lost'"
        " FROM gpu WHERE gpu_id = ANY(%s)",
        (now, [int(g) + 1 for g in plan.lost]),
    )
    # A week of stragglers: one GPU in every 50 once; a few again, in another job, lately.
    conn.execute(
        "INSERT INTO straggler (job_id, node_id, gpu_id, cause, slowdown, started_at, declared_at)"
        " SELECT 'job-' || gpu_id, node_id, gpu_id, 'thermal', 0.2, ts - interval '5 minutes', ts"
        " FROM (SELECT gpu_id, node_id, %s - make_interval(secs => 600 + (gpu_id * 997) %% 600000) AS ts FROM gpu"
        "       WHERE gpu_id %% 50 = 0 OR gpu_id = ANY(%s)) AS s",
        (now, repeat),
    )
    conn.execute(
        "INSERT INTO straggler (job_id, node_id, gpu_id, cause, slowdown, started_at, declared_at)"
        " SELECT 'again-' || gpu_id, node_id, gpu_id, 'unknown', 0.1, ts - interval '5 minutes', ts"
        " FROM (SELECT gpu_id, node_id, %s - make_interval(secs => (gpu_id * 13) %% 600) AS ts FROM gpu"
        "       WHERE gpu_id = ANY(%s)) AS s",
        (now, repeat),
    )


async def _partitions(dsn: str, days: set[Any]) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
        await partitions.ensure(conn, days)
