"""Helpers shared by the exporter tests (and the fault tests, which push the same way)."""

from __future__ import annotations

import time

import psycopg

from gpuscope.exporter.sim import JobSchedule, SimNodeSource, build_topology
from gpuscope.exporter.snapshot import Snapshot


def snapshots(count: int) -> list[Snapshot]:
    """`count` snapshots of one simulated eight-GPU node, one a second, ending about now."""
    topology = build_topology(1, 8, 1, cluster="test")
    source = SimNodeSource(topology[0], JobSchedule(topology, 2), 2)
    now = time.time() - count
    out = []
    for i in range(count):
        gpus, ports = source.read(now + i)
        out.append(Snapshot(ts=now + i, gpus=gpus, ports=ports))
    return out


def stored_rows(dsn: str) -> tuple[int, int]:
    """(rows, distinct (gpu, ts)) in gpu_sample."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*), count(DISTINCT (gpu_id, ts)) FROM gpu_sample").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])
