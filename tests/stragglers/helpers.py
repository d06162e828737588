"""A simulated training job pushed through a real collector, and straggler-watch cycles run over the
database: shared by the watch's tests and the dashboard's browser tests."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from datetime import datetime

import psycopg

from gpuscope.exporter.sim.training import Telemetry, TrainingJob
from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, JobInfo, PortIdentity, PortReading, Snapshot
from gpuscope.exporter.wire import Origin
from gpuscope.stragglers.watch import StragglerWatch
from tests.collector.helpers import push_binary
from tests.processes import RunningCollector

JOB = TrainingJob(nodes=2, gpus_per_node=4, seed=8)
HISTORY_S = 2400.0


def gpu_values(telemetry: Telemetry, rank: int, i: int) -> dict[str, float]:
    """What rank `rank`'s GPU reports at sample `i`: the metrics it has a value for (NaN: dropped)."""
    return {k: float(v[rank, i]) for k, v in telemetry.gpu.items() if v[rank, i] == v[rank, i]}


def push(
    collector: RunningCollector,
    telemetry: Telemetry,
    start: float,
    job_id: str,
    nodes: Iterable[int] = range(JOB.nodes),
) -> None:
    """The job's telemetry (simulated for JOB's shape), from `start`, as its nodes' exporters push it."""
    for node in nodes:
        origin = Origin("c", "r1", f"{job_id}-n{node}", "sim", str(uuid.uuid4()))
        gpus = [GpuIdentity(i, f"GPU-{job_id}-{node}-{i}", "H100", f"00:{i:02x}") for i in range(JOB.gpus_per_node)]
        snapshots = []
        for i, t in enumerate(telemetry.times):
            readings = []
            for local, identity in enumerate(gpus):
                rank = node * JOB.gpus_per_node + local
                values = gpu_values(telemetry, rank, i)
                readings.append(GpuReading(identity, True, values=values))
            port = PortReading(PortIdentity("mlx5_0", 1), {k: float(v[node, i]) for k, v in telemetry.nic.items()})
            jobs = {g.index: JobInfo(job_id, "alice") for g in gpus}
            snapshots.append(Snapshot(ts=start + t, gpus=tuple(readings), ports=(port,), jobs=jobs))
        for seq, lo in enumerate(range(0, len(snapshots), 60), start=1):
            push_binary(collector, origin, seq, snapshots[lo : lo + 60])


def watch(dsn: str, watcher: StragglerWatch, now: datetime) -> int:
    """One cycle of `watcher` at `now`."""

    async def run() -> int:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            return await watcher.cycle(conn, now)

    return asyncio.run(run())


def between(telemetry: Telemetry, start_s: float, end_s: float) -> Telemetry:
    """The part of `telemetry` from `start_s` to before `end_s` (what a node that pushes late has
    delivered so far, or what it delivers next)."""
    kept = (telemetry.times >= start_s) & (telemetry.times < end_s)
    return Telemetry(
        telemetry.times[kept],
        {k: v[:, kept] for k, v in telemetry.gpu.items()},
        {k: v[:, kept] for k, v in telemetry.nic.items()},
        telemetry.step_s[kept],
        telemetry.clean_step_s[kept],
        telemetry.faults,
    )
