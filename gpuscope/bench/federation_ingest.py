"""Ingest for `bench federation`: the collector's write path (GroupWriter over store_batches, as the
ingest API hands it decoded batches) into one cluster database, then into every cluster database at
once, one writer process each, in the same run; and the same sample rows written through the
coordinator's partitioned table (routed by postgres_fdw) against written to the cluster directly.

Each writer process builds its nodes' batches from the exporter's simulator and wire encoder (format
v2, 10 one-second snapshots of 8 GPUs per batch, as `bench ingest`), decodes them as the API would,
stores every node's first batch (inventory is created once per node), then waits for the others and
stores the rest, each node's batches in order with one in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import queue
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import psycopg
from psycopg_pool import AsyncConnectionPool

from gpuscope.collector.ingest.wire import decode
from gpuscope.collector.store.batch import Batch
from gpuscope.collector.store.copy_binary import CopyColumn, encode
from gpuscope.collector.store.group_writer import GroupWriter
from gpuscope.collector.store.writer import InventoryCache
from gpuscope.core.ingest_wire import BINARY_CONTENT_TYPE
from gpuscope.exporter.sim import JobSchedule, SimNodeSource, build_topology
from gpuscope.exporter.snapshot import Snapshot
from gpuscope.exporter.wire import Origin, encode_binary

GPUS = 8
SNAPSHOTS_PER_BATCH = 10
MAX_WRITES = 8  # the collector's default max_concurrent_writes: its pool, and half of it as writers
ROUTED_COLUMNS = ("ts", "gpu_id", "up", "util_pct", "power_w", "temp_c")


def parallel_rows_per_s(dsns: Sequence[str], label: str, nodes: int, batches: int) -> dict[str, Any]:
    """One writer process per database, timed together: rows stored per second over all of them."""
    context = multiprocessing.get_context("spawn")  # no connection or event loop carried into the children
    barrier = context.Barrier(len(dsns))
    results: Any = context.Queue()
    workers = [
        context.Process(target=_writer, args=(dsn, f"{label}{k}", nodes, batches, barrier, results))
        for k, dsn in enumerate(dsns)
    ]
    for worker in workers:
        worker.start()
    try:
        outcomes = [_next_outcome(results, workers) for _ in workers]
    finally:
        for worker in workers:
            worker.join(30)
            if worker.is_alive():
                worker.kill()
    failed = [o for o in outcomes if isinstance(o, str)]
    if failed:
        raise RuntimeError(f"a writer failed: {failed[0]}")
    rows = sum(o[0] for o in outcomes)
    seconds = max(o[2] for o in outcomes) - min(o[1] for o in outcomes)
    return {"rows": rows, "seconds": round(seconds, 2), "rows_per_s": round(rows / seconds)}


def _next_outcome(results: Any, workers: list[Any], timeout_s: float = 600) -> Any:
    """The next writer's result; an error where every writer has exited without one (killed, or it
    could not start) or the writers take longer than `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(queue.Empty):
            return results.get(timeout=1)
        if not any(worker.is_alive() for worker in workers):
            with contextlib.suppress(queue.Empty):
                return results.get(timeout=1)
            return "a writer process exited without a result (exit codes " + str([w.exitcode for w in workers]) + ")"
    return f"the writers did not finish in {timeout_s:g} s"


def _writer(dsn: str, label: str, nodes: int, batches: int, barrier: Any, results: Any) -> None:
    try:
        results.put(asyncio.run(_write(dsn, label, nodes, batches, barrier)))
    except Exception as exc:  # reported to the parent, which raises it
        barrier.abort()
        results.put(f"{label}: {exc!r}")


async def _write(dsn: str, label: str, nodes: int, batches: int, barrier: Any) -> tuple[int, float, float]:
    per_node = _batches(label, nodes, batches)
    pool = AsyncConnectionPool(dsn, min_size=1, max_size=MAX_WRITES, open=False)
    await pool.open(wait=True, timeout=30)
    writer = GroupWriter(pool, InventoryCache(), writers=MAX_WRITES // 2)
    try:
        await asyncio.gather(*(writer.store(node[0]) for node in per_node))
        barrier.wait(120)
        started = time.monotonic()
        await asyncio.gather(*(_send(writer, node[1:]) for node in per_node))
        finished = time.monotonic()
    finally:
        await writer.close()
        await pool.close()
    return sum(len(b.gpu_samples) for node in per_node for b in node[1:]), started, finished


async def _send(writer: GroupWriter, batches: list[Batch]) -> None:
    for batch in batches:
        await writer.store(batch)


def _batches(label: str, nodes: int, batches: int) -> list[list[Batch]]:
    """Per node, its decoded batches in order: real simulator readings, re-labelled per node."""
    topology = build_topology(1, GPUS, 1, cluster=label)
    source = SimNodeSource(topology[0], JobSchedule(topology, 7), 7)
    start = time.time() - batches * SNAPSHOTS_PER_BATCH - 60
    readings = [source.read(start + i) for i in range(batches * SNAPSHOTS_PER_BATCH)]
    now = time.time()
    per_node = []
    for n in range(nodes):
        origin = Origin(label, f"rack-{n // 40:02d}", f"{label}-node-{n:04d}", "sim", str(uuid.uuid4()))
        node = []
        for b in range(batches):
            chunk = range(b * SNAPSHOTS_PER_BATCH, (b + 1) * SNAPSHOTS_PER_BATCH)
            body = encode_binary(origin, b + 1, [Snapshot(ts=start + i, gpus=readings[i][0], ports=()) for i in chunk])
            node.append(decode(body, now, content_type=BINARY_CONTENT_TYPE))
        per_node.append(node)
    return per_node


def copy_rows_per_s(dsn: str, gpu_ids: np.ndarray, first_ts: float, rows: int) -> float:
    """Sample rows for these GPUs (one per GPU per second from `first_ts`) by one binary COPY, as the
    writer copies: rows per second. Through the coordinator, each row is routed to its foreign partition."""
    data = _rows(gpu_ids, first_ts, rows)
    statement = f"COPY gpu_sample ({', '.join(ROUTED_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
    with psycopg.connect(dsn) as conn:
        started = time.perf_counter()
        with conn.cursor().copy(statement) as copy:
            copy.write(data)
        conn.commit()
        return rows / (time.perf_counter() - started)


def insert_rows_per_s(dsn: str, gpu_ids: np.ndarray, first_ts: float, rows: int) -> float:
    """The same rows as one INSERT ... SELECT FROM unnest(): through the coordinator postgres_fdw sends
    them in remote INSERTs of the server's batch_size rows (COPY into a foreign table goes row by row)."""
    ts, ids, values = _values(gpu_ids, first_ts, rows)
    with psycopg.connect(dsn) as conn:
        started = time.perf_counter()
        conn.execute(
            "INSERT INTO gpu_sample (ts, gpu_id, up, util_pct, power_w, temp_c)"
            " SELECT t, g, true, u, p, c FROM unnest(%s::timestamptz[], %s::int[], %s::real[], %s::real[],"
            " %s::real[]) AS r (t, g, u, p, c)",
            ([_time(s) for s in ts], ids.tolist(), values.tolist(), values.tolist(), values.tolist()),
        )
        conn.commit()
        return rows / (time.perf_counter() - started)


def writer_error(dsn: str) -> str | None:
    """What the collector's writer says when pointed at the coordinator: None if a batch was stored."""
    return asyncio.run(_writer_error(dsn))


async def _writer_error(dsn: str) -> str | None:
    batch = _batches("coordinator", 1, 1)[0][0]
    async with AsyncConnectionPool(dsn, min_size=1, max_size=1, open=False) as pool:
        writer = GroupWriter(pool, InventoryCache(), writers=1)
        try:
            await writer.store(batch)
        except Exception as exc:  # whatever it is, it is the finding
            return str(exc).splitlines()[0]
        finally:
            await writer.close()
    return None


def _values(gpu_ids: np.ndarray, first_ts: float, rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ts = first_ts + np.arange(rows) // len(gpu_ids)
    ids = np.resize(gpu_ids, rows).astype(np.int64)
    return ts.astype(np.float64), ids, (np.arange(rows) % 100).astype(np.float32)


def _rows(gpu_ids: np.ndarray, first_ts: float, rows: int) -> memoryview:
    ts, ids, values = _values(gpu_ids, first_ts, rows)
    return encode(
        [CopyColumn("timestamptz", ts), CopyColumn("int4", ids), CopyColumn("bool", np.ones(rows, dtype=bool))]
        + [CopyColumn("float4", values) for _ in ROUTED_COLUMNS[3:]]
    )


def _time(seconds: float) -> datetime:
    return datetime.fromtimestamp(float(seconds), UTC)
