"""Alert evaluation at cluster scale: 10,000 GPUs (1,250 nodes of 8) with 5,000 InfiniBand ports,
30 minutes of 10 s samples, minute rollups, half the GPUs in running jobs, a sprinkling of hot,
throttled, lost and erroring GPUs, XIDs, down links, stragglers and silent exporters; then the
shipped default rules evaluated and notifications decided, cycle after cycle, as the engine does."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg

from gpuscope.alerts import views
from gpuscope.alerts.config import parse_notify_config
from gpuscope.alerts.engine import AlertEngine
from gpuscope.alerts.rules import default_rules_text, parse_rules
from gpuscope.bench.fleet_db import create_fleet
from gpuscope.collector.store import partitions, rollups
from gpuscope.collector.store.copy_binary import CopyColumn, encode
from gpuscope.collector.store.migrate import migrate
from gpuscope.core.embedded_pg import throwaway_postgres

NODES, GPUS_PER_NODE, PORTS_PER_NODE = 1250, 8, 4
STEP_S, MINUTES = 10, 30
CYCLES = 10


def run() -> dict[str, Any]:
    with throwaway_postgres("gpuscope-bench-alerts-") as pg:
        migrate(pg.dsn)
        views.apply(pg.dsn)
        now = datetime.now(UTC).replace(microsecond=0)
        started = time.perf_counter()
        rows = _load(pg.dsn, now)
        load_s = time.perf_counter() - started
        figures = asyncio.run(measure(pg.dsn))
    return {"gpus": NODES * GPUS_PER_NODE, "ports": NODES * PORTS_PER_NODE, "rows_loaded": rows,
            "load_seconds": round(load_s, 1), **figures}  # fmt: skip


async def measure(dsn: str, cycles: int = CYCLES) -> dict[str, Any]:
    """The shipped default rules over the fleet in `dsn` (its alert views applied): a warm-up cycle, then
    `cycles` timed ones, as the engine runs them (every group, then the notifications decided)."""
    groups = parse_rules(default_rules_text())
    config = parse_notify_config(
        {
            "route": {"receiver": "ops", "group_by": ["alertname", "cluster"], "group_wait": "0s"},
            "receivers": [{"name": "ops", "kind": "webhook", "url": "http://127.0.0.1:9/"}],
            "inhibit_rules": [{"source_matchers": ["alertname=ExporterDown"],
                               "target_matchers": ["alertname!=ExporterDown"], "equal": ["cluster", "node"]}],
        }
    )  # fmt: skip
    engine = AlertEngine(groups, config)
    per_rule: dict[str, list[float]] = defaultdict(list)
    times = []
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        # The loaded nodes have just pushed (but for the ten that went quiet in _load).
        await conn.execute("UPDATE node_seen SET last_seen = now() WHERE push_interval_s IS NOT NULL AND node_id > 10")
        await engine.load(conn)
        await engine.cycle(conn)  # warm: first plans, first inserts of every alert
        for _ in range(cycles):
            t0 = time.perf_counter()
            results = await engine.cycle(conn)
            times.append((time.perf_counter() - t0) * 1000)
            for r in results:
                per_rule[r.rule.alert].append(r.seconds * 1000)
        errors = {r.rule.alert: r.error for r in results if r.error}
        cur = await conn.execute("SELECT count(*) FROM alert_notification")
        queued = (await cur.fetchone() or (0,))[0]
    states: dict[str, int] = defaultdict(int)
    for inst in engine.instances.values():
        states[f"{inst.alertname}:{inst.state}"] += 1
    return {
        "rules": sum(len(g.rules) for g in groups),
        "cycle_ms_p50": round(statistics.median(times), 1),
        "cycle_ms_max": round(max(times), 1),
        "rule_ms_median": {name: round(statistics.median(t), 1) for name, t in per_rule.items()},
        "alerts": dict(sorted(states.items())),
        "notifications_queued": queued,
        "rule_errors": errors,
    }


def _load(dsn: str, now: datetime) -> int:
    rng = np.random.default_rng(7)
    stamps = np.arange((now - timedelta(minutes=MINUTES)).timestamp(), now.timestamp(), STEP_S) + STEP_S
    gpus, ports = NODES * GPUS_PER_NODE, NODES * PORTS_PER_NODE
    with psycopg.connect(dsn) as conn:
        create_fleet(conn, NODES, GPUS_PER_NODE, PORTS_PER_NODE)
        conn.commit()

        async def make_partitions() -> None:
            async with await psycopg.AsyncConnection.connect(dsn) as aconn, aconn.transaction():
                await partitions.ensure(
                    aconn, {partitions.day_of(float(stamps[0])), partitions.day_of(float(stamps[-1]))}
                )

        asyncio.run(make_partitions())
        hot = rng.choice(gpus, gpus // 100, replace=False)  # 1% over temperature
        throttled = hot[: len(hot) // 2]
        lost = rng.choice(gpus, 5, replace=False)
        ecc = rng.choice(gpus, 10, replace=False)
        nvlink = rng.choice(gpus, 20, replace=False)
        for i, t in enumerate(stamps):
            ids = np.arange(1, gpus + 1)
            temp = rng.normal(62, 4, gpus)
            temp[hot] = 88 + rng.uniform(0, 4, len(hot))
            reasons = np.zeros(gpus)
            reasons[throttled] = 0x40
            up = np.ones(gpus, dtype=bool)
            up[lost] = False
            ecc_unc = np.zeros(gpus)
            ecc_unc[ecc] = i // 6
            crc = np.zeros(gpus)
            crc[nvlink] = i
            util = rng.uniform(50, 100, gpus)
            util[: gpus // 100] = 1.0  # idle GPUs, some of them in jobs
            columns = [
                CopyColumn("timestamptz", np.full(gpus, t)), CopyColumn("int4", ids), CopyColumn("bool", up),
                CopyColumn("float4", util), CopyColumn("float4", temp),
                CopyColumn("float4", rng.uniform(300, 700, gpus)),
                CopyColumn("int8", reasons), CopyColumn("int8", ecc_unc), CopyColumn("int8", crc),
                CopyColumn("int8", np.zeros(gpus)), CopyColumn("int2", np.zeros(gpus)),
            ]  # fmt: skip
            with conn.cursor().copy(
                "COPY gpu_sample (ts, gpu_id, up, util_pct, temp_c, power_w, clock_event_reasons, ecc_uncorrected,"
                " nvlink_crc_errors, pcie_replay, remap_failure) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.write(encode(columns))
            state = np.full(ports, 4)
            state[:3] = 1  # three links down
            symbols = np.zeros(ports)
            symbols[10:20] = i
            port_columns = [
                CopyColumn("timestamptz", np.full(ports, t)), CopyColumn("int4", np.arange(1, ports + 1)),
                CopyColumn("int2", state), CopyColumn("int2", np.where(state == 4, 5, 3)),
                CopyColumn("int8", symbols), CopyColumn("int8", np.zeros(ports)),
                CopyColumn("int8", np.full(ports, i * 10**9)),
            ]  # fmt: skip
            with conn.cursor().copy(
                "COPY ib_port_sample (ts, port_id, state, phys_state, symbol_errors, link_downed, xmit_bytes)"
                " FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.write(encode(port_columns))
        conn.execute(
            "INSERT INTO rollup_dirty_minute SELECT generate_series(date_bin('1 minute', %s::timestamptz, 'epoch'),"
            " %s::timestamptz, interval '1 minute') ON CONFLICT DO NOTHING",
            (now - timedelta(minutes=MINUTES), now),
        )
        # Half the GPUs in running jobs of 8, started an hour ago; 5 active stragglers; 40 XIDs.
        conn.execute(
            "INSERT INTO job_allocation (job_id, username, node_id, gpu_id, started_at, last_seen)"
            " SELECT 'job-' || node_id, 'user' || (node_id % 50), node_id, gpu_id, now() - interval '1 hour', now()"
            " FROM gpu WHERE node_id % 2 = 0"
        )
        conn.execute(
            "INSERT INTO straggler (job_id, node_id, gpu_id, cause, slowdown, started_at, declared_at)"
            " SELECT 'job-' || node_id, node_id, gpu_id, 'thermal', 0.2, now() - interval '5 minutes', now()"
            " FROM gpu WHERE node_id % 2 = 0 AND gpu_index = 3 LIMIT 5"
        )
        conn.execute(
            "INSERT INTO event (ts, node_id, gpu_id, kind, code, count) SELECT now() - interval '2 minutes',"
            " node_id, gpu_id, 'xid', (ARRAY[13, 31, 48, 79])[1 + gpu_id % 4], 1 FROM gpu WHERE gpu_id % 250 = 0"
        )
        conn.execute(
            "INSERT INTO node_seen (node_id, last_seen, push_interval_s) SELECT node_id,"
            " CASE WHEN node_id <= 10 THEN now() - interval '10 minutes' ELSE now() END, 10 FROM node"
        )
        conn.commit()
    asyncio.run(_roll_up_all(dsn, now))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return len(stamps) * (gpus + ports)


async def _roll_up_all(dsn: str, now: datetime) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while await rollups.roll_up(conn, now + timedelta(hours=1)):
            pass
