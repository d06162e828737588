"""`gpuscope bench scale`: what the product does at 100,000 GPUs (12,500 nodes of 8, with 8 InfiniBand
ports each) sampled every 10 s, each figure next to the interval it must fit in.

Samples go straight into one private PostgreSQL as the collector stores them (bench/scale_fleet.py), as
much history as a time budget allows (bench/scale_load.py), rolled up as maintenance does; the
database's growth per simulated day gives the storage per day. 10,000 single-node jobs then run on the
fleet, and the product's periodic work is timed on it, the samples kept up with the wall clock before
each: the straggler watch's cycle (bench/stragglers_cycle.py's timing, the watch's 5 s interval), the
alert engine over the shipped default rules (bench/alerts.py's, the shortest group interval), the health
cycle (bench/health_evidence.py's, the policy's interval), the dashboard's overview and heatmap reads
(bench/scale_reads.py, against the sampling interval: new data comes no faster). A cycle's figure is
the slowest of those timed (at 10 s samples and a 5 s watch, only every other watch cycle has a bucket
to read), a read's the 95th percentile of its runs. Last, with the big database gone, `bench ingest`
measures the real collector over HTTP, its batches carrying the fleet's 8 InfiniBand ports per node as
well as its 8 GPUs: its rows per second over the fleet's GPU and port rows per second is the ingest
headroom."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import psycopg

from gpuscope.alerts import views
from gpuscope.alerts.rules import default_rules_text, parse_rules
from gpuscope.bench import alerts as alerts_bench
from gpuscope.bench import health_evidence, ingest, stragglers_cycle, stragglers_shards
from gpuscope.bench.scale_fleet import GPUS_PER_NODE, PORTS_PER_NODE, STEP_S, Fleet, create, start_jobs, write
from gpuscope.bench.scale_load import Timeline, load, make_partitions, refresh, roll_up
from gpuscope.bench.scale_reads import time_pages
from gpuscope.collector.store.migrate import migrate
from gpuscope.collector_process import CollectorSettings
from gpuscope.core.embedded_pg import throwaway_postgres
from gpuscope.dashboard.context import REFRESH_MS
from gpuscope.health.policy import HealthPolicy

LOAD_BUDGET_S = 180.0
MIN_MINUTES = 20  # the health loop's first cycle looks back 15 minutes, alert rules 10
MAX_DB_BYTES = 14 * 10**9  # the disk here: about 45 minutes of the full fleet
JOBS_STARTED_S = 180  # before the watch's first cycle: it replays this much (25 minutes at most)
ROLLUP_INTERVAL_S = 60.0  # collector/main.py: maintenance rolls up once a minute


def run(
    gpus: int = 100_000, budget_s: float = LOAD_BUDGET_S, skip_ingest: bool = False, collectors: int = 1
) -> dict[str, Any]:
    """`collectors`: the straggler watch split over that many processes, each leading its shards."""
    with throwaway_postgres("gpuscope-bench-scale-") as pg:
        figures = measure(pg.dsn, gpus, budget_s, collectors=collectors)
    ingest_rows_per_s = None if skip_ingest else float(ingest.run(ports_per_node=PORTS_PER_NODE)["rows_per_s"])
    return summary(figures, ingest_rows_per_s)


def measure(
    dsn: str,
    gpus: int,
    budget_s: float = LOAD_BUDGET_S,
    min_minutes: int = MIN_MINUTES,
    straggler_cycles: int = 10,
    alert_cycles: int = 5,
    health_minutes: int = 3,
    dashboard_runs: int = 5,
    collectors: int = 1,
) -> dict[str, Any]:
    """The fleet loaded into `dsn` (an empty database; the schema is applied here), then every cycle timed."""
    migrate(dsn)
    views.apply(dsn)
    make_partitions(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        fleet = create(conn, -(-gpus // GPUS_PER_NODE))
        empty = _sizes(conn)
        started = time.perf_counter()
        timeline = load(conn, fleet, budget_s, min_minutes, MAX_DB_BYTES)
        load_s = time.perf_counter() - started
        started = time.perf_counter()
        asyncio.run(roll_up(dsn, timeline))
        rolled_s = time.perf_counter() - started
        started = time.perf_counter()
        conn.execute("VACUUM ANALYZE")  # what autovacuum would have done by now, not to compete with the timings
        figures: dict[str, Any] = {
            "gpus": fleet.gpus,
            "nodes": fleet.nodes,
            "ports": fleet.ports,
            "jobs": fleet.jobs,
            "sample_interval_s": STEP_S,
            "simulated_minutes": round(timeline.minutes, 1),
            "rows_loaded": timeline.rows,
            "load_s": round(load_s, 1),
            "load_rows_per_s": round(timeline.rows / load_s),
            "vacuum_analyze_s": round(time.perf_counter() - started, 1),
            **_storage(empty, _sizes(conn), timeline, fleet),
        }
        phases: dict[str, Callable[[], dict[str, Any]]] = {
            "stragglers": lambda: _stragglers(conn, dsn, fleet, timeline, straggler_cycles, collectors),
            "alerts": lambda: _alerts(dsn, alert_cycles),
            "health": lambda: _health(dsn, timeline.now, health_minutes),
            "dashboard": lambda: time_pages(dsn, dashboard_runs),
        }
        spent = {"load": load_s, "first_rollup": rolled_s, "vacuum_analyze": figures["vacuum_analyze_s"]}
        for name, phase in phases.items():
            started = time.perf_counter()
            refresh(conn, dsn, fleet, timeline)  # the minutes since: ingest and maintenance would have kept up
            figures.update(phase())
            spent[name] = time.perf_counter() - started
        figures["rows_stored"] = _count_samples(conn)
    figures["rows_written"] = timeline.rows
    figures["phase_s"] = {name: round(seconds, 1) for name, seconds in spent.items()}
    figures["rollup_s_per_minute"] = round(timeline.rollup_s / max(1, timeline.minutes_rolled), 2)
    figures["rollup_interval_s"] = ROLLUP_INTERVAL_S
    return figures


def _stragglers(
    conn: psycopg.Connection[Any], dsn: str, fleet: Fleet, timeline: Timeline, cycles: int, collectors: int = 1
) -> dict[str, Any]:
    now = timeline.now + timedelta(seconds=STEP_S)  # the next sample's time: everything before it is stored
    start_jobs(conn, fleet, now - timedelta(seconds=JOBS_STARTED_S))

    def arrive(loader: psycopg.Connection[Any], bucket: datetime) -> None:
        if bucket.timestamp() % STEP_S == 0:  # the watch's buckets are 5 s; the fleet samples every 10 s
            timeline.rows += write(loader, fleet, np.array([bucket.timestamp()]))
            timeline.newest = max(timeline.newest, bucket.timestamp())

    if collectors > 1:
        found = stragglers_shards.measure(dsn, now, arrive, cycles, collectors)
        sharded = {key: found[key] for key in ("jobs_per_collector", "shards_per_collector", "straggler_shard_cycle_s")}
    else:
        found, sharded = asyncio.run(stragglers_cycle.measure(dsn, now, arrive, cycles)), {}
    interval = CollectorSettings.model_fields["straggler_interval_s"].default
    return {
        "straggler_jobs": found["jobs"],
        # With K collectors, the slowest of them in each cycle (they run at once), against 5 s / K.
        "straggler_collectors": collectors,
        "straggler_cycle_s": found["straggler_cycle_max_s"],
        "straggler_cycle_p50_s": found["straggler_cycle_s"],
        "straggler_interval_s": interval,
        "straggler_target_s": round(interval / collectors, 3),
        **sharded,
        "straggler_replay_s": found["replay_s"],
        "straggler_replay_minutes": JOBS_STARTED_S / 60,
        "straggler_jobs_fed_to_the_last_bucket": found["jobs_fed_to_the_last_bucket"],
    }


def _alerts(dsn: str, cycles: int) -> dict[str, Any]:
    found = asyncio.run(alerts_bench.measure(dsn, cycles))
    return {
        "alert_cycle_s": round(found["cycle_ms_max"] / 1000, 3),
        "alert_cycle_p50_s": round(found["cycle_ms_p50"] / 1000, 3),
        "alert_interval_s": min(group.interval_s for group in parse_rules(default_rules_text())),
        "alert_rules": found["rules"],
        "alert_rule_ms": found["rule_ms_median"],
        "alert_rule_errors": found["rule_errors"],
        "alerts": found["alerts"],
    }


def _health(dsn: str, now: datetime, minutes: int) -> dict[str, Any]:
    loop_log = logging.getLogger("gpuscope.health.loop")
    level = loop_log.level
    loop_log.setLevel(logging.ERROR)  # the dry run's refused drains: a line per node and cycle at this size
    try:
        evidence = asyncio.run(health_evidence.time_evidence(dsn, now, cycles=minutes))
        loop = asyncio.run(health_evidence.time_loop(dsn, now, minutes=minutes))
    finally:
        loop_log.setLevel(level)
    return {
        "health_cycle_s": loop["health_cycle_s_max"],
        "health_cycle_p50_s": loop["health_cycle_s"],
        "health_interval_s": HealthPolicy().every_s,
        "health_first_cycle_s": loop["health_first_cycle_s"],
        "health_states": loop["health_states"],
        "health_evidence_minute_ms": evidence["cycle_ms_max"],
        "health_findings_by_kind": evidence["findings_by_kind"],
    }


def _sizes(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """The database's bytes, and those of the relations (with their indexes) that grow with the samples."""
    rows = conn.execute(
        "SELECT CASE WHEN relname LIKE 'gpu\\_sample\\_p%' THEN 'gpu_samples'"
        "  WHEN relname LIKE 'ib\\_port\\_sample\\_p%' THEN 'port_samples'"
        "  WHEN relname IN ('gpu_rollup_1m', 'gpu_rollup_1h', 'gpu_energy_1m', 'rack_power_1m') THEN 'rollups'"
        "  WHEN relname = 'ingest_batch' THEN 'ingest_batch' ELSE 'other' END,"
        " sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE c.relkind = 'r' AND n.nspname = 'public' GROUP BY 1"
    ).fetchall()
    total = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    return {**{part: int(size) for part, size in rows}, "database": int(total[0]) if total else 0}


def _storage(empty: dict[str, int], full: dict[str, int], timeline: Timeline, fleet: Fleet) -> dict[str, Any]:
    days = timeline.minutes / 1440
    grown = {part: full[part] - empty.get(part, 0) for part in full}
    per_day = grown["database"] / days
    return {
        "db_bytes": full["database"],
        "db_bytes_per_day": round(per_day),
        "db_bytes_per_gpu_day": round(per_day / fleet.gpus),
        "db_bytes_per_day_by_part": {part: round(size / days) for part, size in sorted(grown.items())},
    }


def _count_samples(conn: psycopg.Connection[Any]) -> int:
    gpu = conn.execute("SELECT count(*) FROM gpu_sample").fetchone()
    port = conn.execute("SELECT count(*) FROM ib_port_sample").fetchone()
    return int(gpu[0] if gpu else 0) + int(port[0] if port else 0)


HEADLINE = (
    ("overview_ms", "overview_interval_ms"),
    ("heatmap_ms", "heatmap_interval_ms"),
    ("straggler_cycle_s", "straggler_target_s"),
    ("alert_cycle_s", "alert_interval_s"),
    ("health_cycle_s", "health_interval_s"),
    ("rollup_s_per_minute", "rollup_interval_s"),
)


def summary(figures: dict[str, Any], ingest_rows_per_s: float | None) -> dict[str, Any]:
    """The headline first: each figure against its interval, whether it fits, and the ingest headroom."""
    figures = {
        **figures,
        "overview_interval_ms": STEP_S * 1000,
        "heatmap_interval_ms": STEP_S * 1000,
        "dashboard_refresh_ms": REFRESH_MS,
    }
    fits = {key.split("_")[0] + "_fits": figures[key] <= figures[interval] for key, interval in HEADLINE}
    headline: dict[str, Any] = {"gpus": figures["gpus"]}
    fleet_rows_per_s = (figures["gpus"] + figures["ports"]) / STEP_S  # both kinds of row, as ingest stores them
    if ingest_rows_per_s is not None:
        headroom = ingest_rows_per_s / fleet_rows_per_s
        headline |= {"ingest_headroom": round(headroom, 2), "ingest_rows_per_s": round(ingest_rows_per_s)}
        fits["ingest_fits"] = headroom >= 1
    headline |= {
        "fleet_rows_per_s": round(fleet_rows_per_s),
        "fleet_gpu_rows_per_s": round(figures["gpus"] / STEP_S),
        "fleet_port_rows_per_s": round(figures["ports"] / STEP_S),
    }
    for key, interval in HEADLINE:
        headline |= {key: figures[key], interval: figures[interval]}
    headline |= {"db_bytes_per_day": figures["db_bytes_per_day"], **fits, "all_fit": all(fits.values())}
    return {**headline, **{key: value for key, value in figures.items() if key not in headline}}
