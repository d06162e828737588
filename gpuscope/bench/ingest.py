"""Ingest throughput, HTTP to database, against raw binary COPY of the same rows in the same run.

A real collector process (uvicorn) on a private PostgreSQL, both on this machine with the load
generator; 1,000 simulated nodes push 10 one-second snapshots of 8 GPUs per batch (80 rows: sampling
every second, the exporter's default 10 s push interval; format v2 from the exporter's own encoder, as
its pusher sends), each node on its own keep-alive connection with at most one batch in flight. Every
node's first batch is sent before timing starts (inventory is created once per node, not in the
steady state). `--workers N` runs the collector as N processes on the port. The baseline
writes the same rows with one large binary COPY per 10,000 rows into an index-free copy of the table:
what the database itself can take here. Commits are durable (synchronous_commit on) in both.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from gpuscope.bench.loadgen import push_all
from gpuscope.bench.running_collector import running_collector
from gpuscope.collector.ingest.wire import decode
from gpuscope.collector.store.columns import GPU_COLUMNS
from gpuscope.collector.store.copy_binary import CopyColumn, encode
from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.core.ingest_wire import BINARY_CONTENT_TYPE
from gpuscope.exporter.sim import JobSchedule, SimNodeSource, build_topology
from gpuscope.exporter.snapshot import Snapshot
from gpuscope.exporter.wire import Origin, encode_binary

NODES = 1000
GPUS = 8
SNAPSHOTS_PER_BATCH = 10
BATCHES_PER_NODE = 10  # the first one is the warm-up
CONTENT = f"Content-Type: {BINARY_CONTENT_TYPE}\r\n"


def run(
    workers: int = 1, nodes: int = NODES, batches_per_node: int = BATCHES_PER_NODE, ports_per_node: int = 0
) -> dict[str, Any]:
    """`ports_per_node`: each snapshot carries that many InfiniBand port readings too, as a node with
    its HCAs sends them (`bench scale` counts its headroom so); rows are then GPU and port rows alike,
    and the raw-COPY baseline (GPU rows) is left out."""
    with tempfile.TemporaryDirectory(prefix="gpuscope-bench-ingest-") as tmp:
        data = Path(tmp)
        data.chmod(0o711)  # as root, PostgreSQL runs as 'postgres' and must pass through
        with EmbeddedPostgres(data / "db") as pg:
            sent = _batches(nodes, batches_per_node, ports_per_node)
            warmup = [[batches[0]] for batches in sent]
            timed = [batches[1:] for batches in sent]
            with running_collector(pg.dsn, data, workers) as collector:
                asyncio.run(push_all("127.0.0.1", collector.port, collector.token, warmup, nodes, CONTENT))
                result = asyncio.run(push_all("127.0.0.1", collector.port, collector.token, timed, nodes, CONTENT))
            stored = _count(pg.dsn)
            expected = sum(rows for batches in sent for _, rows in batches)
            bodies = [body for batches in timed for body, _ in batches]
            raw_rows_per_s = None if ports_per_node else _raw_copy(pg.dsn, bodies)
    rows_per_s = result.rows / result.seconds
    figures = {
        "nodes": nodes,
        "gpus_per_node": GPUS,
        "ports_per_node": ports_per_node,
        "batch_rows": (GPUS + ports_per_node) * SNAPSHOTS_PER_BATCH,
        "concurrency": nodes,
        "collector_workers": workers,
        "timed_rows": result.rows,
        "seconds": round(result.seconds, 2),
        "rows_per_s": round(rows_per_s),
        # A row holds one value per metric the GPU reports: what a Prometheus would store as samples.
        "samples_per_row": samples_per_row(bodies[0]),
        "retried_batches": result.failures,
        "stored_equals_sent": stored == expected,
    }
    if raw_rows_per_s is not None:
        figures |= {"raw_copy_rows_per_s": round(raw_rows_per_s), "ratio": round(rows_per_s / raw_rows_per_s, 3)}
    return figures


def samples_per_row(body: bytes) -> float:
    """Metric values per GPU row of a batch (reported, not NaN), plus `up`."""
    samples = decode(body, time.time(), content_type=BINARY_CONTENT_TYPE).gpu_samples
    values = sum(int(np.count_nonzero(~np.isnan(v.astype(np.float64)))) for v in samples.values.values())
    return round(values / len(samples) + 1, 2)


def _batches(nodes: int, batches_per_node: int, ports_per_node: int = 0) -> list[list[tuple[bytes, int]]]:
    """Per node, its batches in order: real simulator readings, re-labelled per node to save time."""
    topology = build_topology(1, GPUS, 1, ib_ports_per_node=ports_per_node, cluster="bench")
    source = SimNodeSource(topology[0], JobSchedule(topology, 7), 7)
    start = time.time() - batches_per_node * SNAPSHOTS_PER_BATCH - 60
    readings = [source.read(start + i) for i in range(batches_per_node * SNAPSHOTS_PER_BATCH)]
    per_node = []
    for n in range(nodes):
        origin = Origin("bench", f"rack-{n // 40:02d}", f"node-{n:04d}", "sim", str(uuid.uuid4()))
        batches = []
        for b in range(batches_per_node):
            chunk = range(b * SNAPSHOTS_PER_BATCH, (b + 1) * SNAPSHOTS_PER_BATCH)
            snaps = [Snapshot(ts=start + i, gpus=readings[i][0], ports=readings[i][1]) for i in chunk]
            rows = (GPUS + len(readings[0][1])) * SNAPSHOTS_PER_BATCH
            batches.append((encode_binary(origin, b + 1, snaps), rows))
        per_node.append(batches)
    return per_node


def _raw_copy(dsn: str, bodies: list[bytes], chunk_rows: int = 10_000) -> float:
    now = time.time()
    blocks = [decode(body, now, content_type=BINARY_CONTENT_TYPE).gpu_samples for body in bodies]
    keys = [c.key for c in GPU_COLUMNS if c.key in blocks[0].values]
    columns = {key: np.concatenate([b.values[key] for b in blocks]) for key in keys}
    ts = np.concatenate([b.ts for b in blocks])
    gpu = np.concatenate([b.device + 100 * i for i, b in enumerate(blocks)])
    up = np.concatenate([b.up for b in blocks if b.up is not None])
    types = {c.key: c.pg_type for c in GPU_COLUMNS}
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE raw_gpu_sample (LIKE gpu_sample)")  # no indexes: the database's own limit
        conn.commit()
        started = time.perf_counter()
        for lo in range(0, len(ts), chunk_rows):
            part = slice(lo, lo + chunk_rows)
            data = encode(
                [CopyColumn("timestamptz", ts[part]), CopyColumn("int4", gpu[part]), CopyColumn("bool", up[part])]
                + [CopyColumn(types[k], columns[k][part]) for k in keys]
            )
            names = ", ".join(["ts", "gpu_id", "up", *keys])
            with conn.cursor().copy(f"COPY raw_gpu_sample ({names}) FROM STDIN (FORMAT BINARY)") as copy:
                copy.write(data)
            conn.commit()
        elapsed = time.perf_counter() - started
    return len(ts) / elapsed


def _count(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM gpu_sample) + (SELECT count(*) FROM ib_port_sample)"
        ).fetchone()
    return int(row[0]) if row else 0


__all__ = ["run"]
