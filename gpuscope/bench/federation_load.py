"""The bench's telemetry loaded into one gpuscope database, all of it or one cluster's share, as ingest
and maintenance leave it (day partitions, minute and hour rollups, rack power, job allocations).

The same GPUs by position, so that the single database and the cluster databases hold the same
samples: Telemetry.block() depends on the fleet, not on who asks. GPUs are inserted in position order,
so their ids (1, 2, ... in one database; k * ID_BLOCK + 1, ... in cluster k) sort the same way in both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import psycopg

from gpuscope.bench.peers_store import at, make_partitions, roll_up_all
from gpuscope.bench.telemetry import METRICS, GpuId, Telemetry
from gpuscope.collector.store.copy_binary import CopyColumn, encode

CHUNK_ROWS = 200_000


def split_into_clusters(telemetry: Telemetry, clusters: int) -> tuple[Telemetry, list[range]]:
    """The telemetry with its GPUs relabelled into `clusters` clusters of consecutive nodes, and each
    cluster's GPU positions."""
    per_cluster = len(telemetry.gpus) // clusters
    if per_cluster * clusters != len(telemetry.gpus) or per_cluster % 8:
        raise ValueError(f"{len(telemetry.gpus)} GPUs do not split into {clusters} clusters of whole nodes")
    gpus = tuple(replace(g, cluster=cluster_name(p // per_cluster)) for p, g in enumerate(telemetry.gpus))
    return replace(telemetry, gpus=gpus), [range(k * per_cluster, (k + 1) * per_cluster) for k in range(clusters)]


def cluster_name(index: int) -> str:
    return f"cluster-{index}"


def load(dsn: str, telemetry: Telemetry, positions: Sequence[int]) -> int:
    """Samples, inventory and allocations of the GPUs at `positions`, then rolled up; the rows loaded."""
    chosen = np.asarray(positions, dtype=np.int64)
    with psycopg.connect(dsn) as conn:
        gpu_ids = _inventory(conn, [telemetry.gpus[p] for p in chosen])
        conn.commit()
        asyncio.run(make_partitions(dsn, telemetry))
        per_chunk = max(1, CHUNK_ROWS // len(chosen))
        names = ", ".join(["ts", "gpu_id", "up", *METRICS])
        for lo in range(0, telemetry.steps, per_chunk):
            hi = min(lo + per_chunk, telemetry.steps)
            block = telemetry.block(lo, hi)
            rows = (hi - lo) * len(chosen)
            columns = [
                CopyColumn("timestamptz", np.repeat(telemetry.stamps(lo, hi), len(chosen))),
                CopyColumn("int4", np.tile(gpu_ids, hi - lo)),
                CopyColumn("bool", np.ones(rows, dtype=bool)),
            ] + [CopyColumn("float4", block[key][:, chosen].reshape(-1)) for key in METRICS]
            with conn.cursor().copy(f"COPY gpu_sample ({names}) FROM STDIN (FORMAT BINARY)") as copy:
                copy.write(encode(columns))
            conn.commit()
        _allocations(conn, telemetry, dict(zip(chosen.tolist(), gpu_ids.tolist(), strict=True)))
        conn.execute(
            "INSERT INTO rollup_dirty_minute SELECT generate_series(date_bin('1 minute', %s, 'epoch'), %s,"
            " interval '1 minute') ON CONFLICT DO NOTHING",
            (at(telemetry.start), at(telemetry.end)),
        )
        conn.commit()
    asyncio.run(roll_up_all(dsn))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return telemetry.steps * len(chosen)


def _inventory(conn: psycopg.Connection[Any], gpus: list[GpuId]) -> np.ndarray:
    """Nodes, then GPUs, in position order; each GPU's gpu_id, by position."""
    nodes = list(dict.fromkeys((g.cluster, g.node, g.rack) for g in gpus))
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO node (cluster, name, rack) VALUES (%s, %s, %s)", nodes)
    node_ids = {(c, n): i for c, n, i in conn.execute("SELECT cluster, name, node_id FROM node").fetchall()}
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO gpu (node_id, gpu_index, uuid, model, pci_bus_id) VALUES (%s, %s, %s, 'H100', '-')",
            [(node_ids[(g.cluster, g.node)], g.index, g.uuid) for g in gpus],
        )
    by_uuid = dict(conn.execute("SELECT uuid, gpu_id FROM gpu").fetchall())
    return np.array([by_uuid[g.uuid] for g in gpus], dtype=np.int64)


def _allocations(conn: psycopg.Connection[Any], telemetry: Telemetry, gpu_id_of: dict[int, int]) -> None:
    """The jobs' allocations of the GPUs held here (a job over two cluster databases is in both)."""
    node_of = dict(conn.execute("SELECT gpu_id, node_id FROM gpu").fetchall())
    rows = []
    for job in telemetry.jobs:
        ended = None if job.end_step >= telemetry.steps else at(telemetry.start + job.end_step * telemetry.step_s)
        for position in job.gpus:
            if position in gpu_id_of:
                gpu_id = gpu_id_of[position]
                first = at(telemetry.start + job.first_step * telemetry.step_s)
                last = at(telemetry.start + (job.end_step - 1) * telemetry.step_s)
                rows.append((job.job_id, job.user, node_of[gpu_id], gpu_id, first, last, ended))
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO job_allocation (job_id, username, node_id, gpu_id, started_at, last_seen, ended_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            rows,
        )
    conn.commit()
