"""`gpuscope bench federation`: past one primary with PostgreSQL's own mechanism, measured on loopback.

N cluster databases (each a throwaway PostgreSQL with gpuscope's schema, holding its clusters' GPUs)
and one coordinator whose tables are partitioned over postgres_fdw foreign tables, one partition per
cluster database (bench/federation_schema.py). Beside them, one database holding all the same data.

Measured in one run: ingest through the collector's write path into one cluster database, then into
all N at once (the ratio is what adding instances buys here); the same rows written through the
coordinator against written to a cluster directly; the four questions of `bench peers` asked through
the query layer of the coordinator and of the single database (p50/p95 each, answers compared); what
the coordinator pushed down to the clusters (EXPLAIN VERBOSE); and what a query does when one cluster
database is down (stopped: refused) or frozen (accepts, never answers: connect_timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import psycopg

from gpuscope.bench import federation_ingest as ingest
from gpuscope.bench import federation_questions as questions
from gpuscope.bench.federation_explain import explain
from gpuscope.bench.federation_load import cluster_name, split_into_clusters
from gpuscope.bench.federation_schema import (
    CONNECT_TIMEOUT_S,
    ClusterDb,
    allocate_ids,
    analyze,
    build_coordinator,
    set_remote_estimate,
)
from gpuscope.bench.peers_store import load, partitions_of_days
from gpuscope.bench.telemetry import JobSpan, Telemetry, make_telemetry
from gpuscope.collector.query import inventory_counts
from gpuscope.collector.store.migrate import migrate
from gpuscope.core.embedded_pg import EmbeddedPostgres, throwaway_postgres

INSTANCES = 2
GPUS_PER_INSTANCE = 256
HOURS = 6.0
RUNS = 10
INGEST_NODES = 200  # per instance
INGEST_BATCHES = 6  # per node, the first one the warm-up
ROUTED_ROWS = 20_000


def run(
    instances: int = INSTANCES,
    gpus_per_instance: int = GPUS_PER_INSTANCE,
    hours: float = HOURS,
    runs: int = RUNS,
    ingest_nodes: int = INGEST_NODES,
    ingest_batches: int = INGEST_BATCHES,
    routed_rows: int = ROUTED_ROWS,
) -> dict[str, Any]:
    if instances < 2:
        raise ValueError("a federation needs at least 2 cluster instances")
    telemetry, shares = split_into_clusters(make_telemetry(gpus=instances * gpus_per_instance, hours=hours), instances)
    job = questions.longest_finished_job(telemetry)
    figures: dict[str, Any] = {
        "instances": instances,
        "gpus_per_instance": gpus_per_instance,
        "hours": hours,
        "step_s": telemetry.step_s,
        "rows_per_instance": telemetry.steps * gpus_per_instance,
        "runs": runs,
        "job": f"{job.job_id} ({len(job.gpus)} GPUs)",
    }
    with _servers(instances) as (servers, coordinator, single):
        dbs = [ClusterDb(k, pg.dsn, (cluster_name(k),)) for k, pg in enumerate(servers)]
        started = time.perf_counter()
        for db, share in zip(dbs, shares, strict=True):
            migrate(db.dsn)
            allocate_ids(db)
            load(db.dsn, telemetry, share)
        migrate(single.dsn)
        load(single.dsn, telemetry, range(len(telemetry.gpus)))
        build_coordinator(coordinator.dsn, dbs)
        analyze(coordinator.dsn)
        figures["load_s"] = round(time.perf_counter() - started, 1)

        figures |= _questions(coordinator.dsn, single.dsn, dbs, telemetry, job, runs)
        figures |= _pushdown(coordinator.dsn, telemetry, job)
        figures |= _ingest(dbs, coordinator.dsn, ingest_nodes, ingest_batches, routed_rows, telemetry.end)
        figures |= _visible_once(coordinator.dsn, dbs)
        figures |= _down(coordinator.dsn, servers[-1], dbs[-1])
    return figures


@contextlib.contextmanager
def _servers(instances: int) -> Iterator[tuple[list[EmbeddedPostgres], EmbeddedPostgres, EmbeddedPostgres]]:
    """The cluster databases' servers, the coordinator's and the single database's, started and
    stopped all at once (one after another, their start-ups and shutdown checkpoints took most of a
    small run)."""
    prefixes = [f"gpuscope-fdw-{k}-" for k in range(instances)] + ["gpuscope-fdw-coordinator-", "gpuscope-fdw-single-"]
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(len(prefixes)) as pool:
        started = list(pool.map(lambda prefix: stack.enter_context(throwaway_postgres(prefix)), prefixes))
        try:
            yield started[:instances], started[instances], started[instances + 1]
        finally:
            list(pool.map(lambda server: server.stop(), started))


def _questions(
    coordinator: str, single: str, dbs: list[ClusterDb], telemetry: Telemetry, job: JobSpan, runs: int
) -> dict[str, Any]:
    with psycopg.connect(single, autocommit=True) as conn:
        local = questions.ask(conn, telemetry, job, runs)
    with psycopg.connect(coordinator, autocommit=True) as conn:
        federated = questions.ask(conn, telemetry, job, runs)
    set_remote_estimate(coordinator, dbs, True)
    with psycopg.connect(coordinator, autocommit=True) as conn:
        estimated = questions.ask(conn, telemetry, job, runs)
    set_remote_estimate(coordinator, dbs, False)
    figures: dict[str, Any] = {}
    for name in questions.NAMES:
        (ours, answer), (theirs, reference) = federated[name], local[name]
        problems = questions.differences(answer, reference)
        figures[f"{name}_single_ms"] = [theirs.p50, theirs.p95]
        figures[f"{name}_coordinator_ms"] = [ours.p50, ours.p95]
        figures[f"{name}_coordinator_remote_estimate_ms"] = [estimated[name][0].p50, estimated[name][0].p95]
        figures[f"{name}_ratio_p95"] = round(ours.p95 / theirs.p95, 2)
        figures[f"{name}_answers_equal"] = not problems and not questions.differences(estimated[name][1], reference)
        if problems:
            figures[f"{name}_differences"] = problems[:3]
    figures["all_answers_equal"] = all(figures[f"{name}_answers_equal"] for name in questions.NAMES)
    return figures


def _pushdown(coordinator: str, telemetry: Telemetry, job: JobSpan) -> dict[str, Any]:
    """Per question, what its statements sent to the cluster databases (federation_explain.py)."""
    figures = {}
    with psycopg.connect(coordinator, autocommit=True) as conn:
        for name in questions.NAMES:
            found = explain(conn, functools.partial(_ask_one, telemetry, job, name))
            figures[f"{name}_pushdown"] = found.figures()
    return figures


def _ask_one(telemetry: Telemetry, job: JobSpan, name: str, conn: psycopg.Connection[Any]) -> Any:
    return questions.questions(conn, telemetry, job)[name]()


def _ingest(
    dbs: list[ClusterDb], coordinator: str, nodes: int, batches: int, routed_rows: int, after: float
) -> dict[str, Any]:
    one = ingest.parallel_rows_per_s([dbs[0].dsn], "one", nodes, batches)
    every = ingest.parallel_rows_per_s([db.dsn for db in dbs], "all", nodes, batches)
    first = _gpu_ids(dbs[0].dsn)
    everyone = np.concatenate([_gpu_ids(db.dsn) for db in dbs])
    # Rows an hour and more after the telemetry (apart from what was loaded), every GPU on each path,
    # in partitions made for them: three hours on, they fall on the next day from 21:00 UTC.
    starts = (after + 3600, after + 7200, after + 10800)
    last = starts[-1] + routed_rows / max(1, min(len(first), len(everyone)))
    for db in dbs:
        asyncio.run(partitions_of_days(db.dsn, starts[0], last))
    direct = ingest.copy_rows_per_s(dbs[0].dsn, first, starts[0], routed_rows)
    routed_copy = ingest.copy_rows_per_s(coordinator, everyone, starts[1], routed_rows)
    routed_insert = ingest.insert_rows_per_s(coordinator, everyone, starts[2], routed_rows)
    return {
        "ingest_nodes_per_instance": nodes,
        "ingest_one_instance_rows_per_s": one["rows_per_s"],
        "ingest_all_instances_rows_per_s": every["rows_per_s"],
        "ingest_scaling": round(every["rows_per_s"] / one["rows_per_s"], 2),
        "ingest_rows_timed": one["rows"] + every["rows"],
        "routed_rows": routed_rows,
        "copy_direct_rows_per_s": round(direct),
        "copy_through_coordinator_rows_per_s": round(routed_copy),
        "insert_through_coordinator_rows_per_s": round(routed_insert),
        "coordinator_copy_slowdown": round(direct / routed_copy, 1),
        "collector_writer_on_coordinator": ingest.writer_error(coordinator) or "stored",
    }


def _visible_once(coordinator: str, dbs: list[ClusterDb]) -> dict[str, Any]:
    """Every row of every cluster database is in the coordinator's table, once."""
    each = [_count(db.dsn, "gpu_sample") for db in dbs]
    seen = _count(coordinator, "gpu_sample")
    return {"cluster_rows": each, "coordinator_rows": seen, "rows_visible_once": seen == sum(each)}


def _down(coordinator: str, server: EmbeddedPostgres, db: ClusterDb) -> dict[str, Any]:
    """A fresh coordinator session (postgres_fdw keeps its connections per session) asks while one
    cluster database is frozen (it accepts and never answers), then while it is stopped."""
    with _frozen(server):
        frozen_s, frozen = _failure(coordinator)
    server.stop()
    stopped_s, stopped = _failure(coordinator)
    return {
        "down_server": db.server,
        "frozen_instance_error": frozen,
        "frozen_instance_s": round(frozen_s, 2),
        "stopped_instance_error": stopped,
        "stopped_instance_s": round(stopped_s, 2),
        "connect_timeout_s": CONNECT_TIMEOUT_S,
    }


@contextlib.contextmanager
def _frozen(server: EmbeddedPostgres) -> Iterator[None]:
    pid = int((server.pgdata / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _failure(coordinator: str) -> tuple[float, str]:
    started = time.perf_counter()
    try:
        with psycopg.connect(coordinator, autocommit=True) as conn:
            inventory_counts(conn)
    except psycopg.Error as exc:
        return time.perf_counter() - started, " ".join(str(exc).split())
    return time.perf_counter() - started, "answered"


def _gpu_ids(dsn: str) -> np.ndarray:
    with psycopg.connect(dsn) as conn:
        return np.array([row[0] for row in conn.execute("SELECT gpu_id FROM gpu ORDER BY 1")], dtype=np.int64)


def _count(dsn: str, table: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(psycopg.sql.SQL("SELECT count(*) FROM {}").format(psycopg.sql.Identifier(table))).fetchone()
    return int(row[0]) if row else 0


__all__ = ["run"]
