"""A small, busy cluster for the jobs and alerts pages' browser tests, pushed through a real collector as
exporters send it, its minutes rolled up by the collector's own maintenance step and its straggler found
by the real detector:

- train-7 (alice): the simulated 2-node, 8-GPU training run of tests/stragglers, on gpu-a01 and gpu-a02,
  whose gpu-a02 GPU 2 runs hot and slows it by ~20% now; with memory (its peak on gpu-a01 GPU 3) and
  energy counters;
- eval-3 (bob): 4 GPUs of gpu-b01, an A100 that reports no SM or tensor activity, GPUs 2 and 3 idle all
  along (half its GPU time), energy from power only (no counter); gpu-b01 GPU 3 also runs hot;
- prep-12 (carol): one GPU of gpu-b02, ended 20 minutes ago; gpu-b02 GPU 1 reported XID 79 a minute ago;
- notebook-1 (dave): one GPU of gpu-b02, started 40 s ago: nothing of it rolled up yet;
- research/llama: a Kubernetes JobSet on 2 GPUs of gpu-c01: a namespace, no user.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import psycopg

from gpuscope.collector.store import rollups
from gpuscope.exporter.events import Event
from gpuscope.exporter.sim.training import Fault, Telemetry, simulate
from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, JobInfo, PortIdentity, PortReading, Snapshot
from gpuscope.exporter.wire import Origin
from gpuscope.stragglers.watch import StragglerWatch
from tests.collector.helpers import push_binary
from tests.processes import RunningCollector
from tests.stragglers.helpers import HISTORY_S, JOB, gpu_values, watch

GIB = 2**30
TOTAL_BYTES = 80 * GIB
PEAK = ("gpu-a01", 3, 71.5 * GIB)  # train-7's peak memory: where, and how much
TRAIN_NODES = ("gpu-a01", "gpu-a02")
HOT = ("gpu-a02", 2)  # train-7's straggler
SAMPLE_S = 5.0


@dataclass(frozen=True)
class Loaded:
    """What the tests compare the pages with."""

    train_energy_kwh: float  # from the counters' first and last readings of each of train-7's GPUs
    train_uuids: dict[tuple[str, int], str]
    eval_uuids: dict[int, str]


def load(collector: RunningCollector) -> Loaded:
    now = time.time()
    start = now - HISTORY_S - 20
    telemetry = simulate(JOB, [Fault("thermal", 1, HOT[1], 1500.0, HISTORY_S + 3600, 0.2)], HISTORY_S)
    energy_kwh, train_uuids = _push_training(collector, telemetry, start)
    watch(collector.dsn, StragglerWatch(), datetime.fromtimestamp(start + HISTORY_S + 20, UTC))
    eval_uuids = _push_eval(collector, now)
    _push_small_jobs(collector, now)
    roll_up(collector.dsn)
    return Loaded(energy_kwh, train_uuids, eval_uuids)


def roll_up(dsn: str) -> None:
    """What the collector's maintenance does every minute: roll up every settled minute."""

    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            while await rollups.roll_up(conn):
                pass

    asyncio.run(run())


def _push_training(collector: RunningCollector, telemetry: Telemetry, start: float) -> tuple[float, dict]:
    """train-7 as its two nodes' exporters push it, with memory and energy counters added."""
    ranks = JOB.nodes * JOB.gpus_per_node
    power = np.nan_to_num(telemetry.gpu["power_w"], nan=300.0)
    energy = 5e7 + np.cumsum(power * SAMPLE_S, axis=1)  # the board counts whether or not it is read
    steady = np.linspace(58, 66, ranks)[:, None] * GIB * np.ones_like(power)
    peak_rank = TRAIN_NODES.index(PEAK[0]) * JOB.gpus_per_node + PEAK[1]
    steady[peak_rank, -100] = PEAK[2]  # a spike in its last hour
    kwh = 0.0
    uuids = {}
    for node, name in enumerate(TRAIN_NODES):
        origin = Origin("c", "r1", name, "sim", str(uuid.uuid4()))
        gpus = [GpuIdentity(i, f"GPU-{uuid.uuid4()}", "H100", f"00:{i:02x}") for i in range(JOB.gpus_per_node)]
        uuids.update({(name, g.index): g.uuid for g in gpus})
        snapshots = []
        for i, t in enumerate(telemetry.times):
            readings = []
            for local, identity in enumerate(gpus):
                rank = node * JOB.gpus_per_node + local
                values = gpu_values(telemetry, rank, i)
                if values:  # a dropped sample carries nothing, its counter neither
                    values |= {
                        "fb_used_bytes": float(steady[rank, i]),
                        "fb_total_bytes": float(TOTAL_BYTES),
                        "energy_j": float(energy[rank, i]),
                    }
                readings.append(GpuReading(identity, True, values=values))
            port = PortReading(PortIdentity("mlx5_0", 1), {k: float(v[node, i]) for k, v in telemetry.nic.items()})
            jobs = {g.index: JobInfo("train-7", "alice") for g in gpus}
            snapshots.append(Snapshot(ts=start + t, gpus=tuple(readings), ports=(port,), jobs=jobs))
        for seq, lo in enumerate(range(0, len(snapshots), 60), start=1):
            push_binary(collector, origin, seq, snapshots[lo : lo + 60])
        for local in range(JOB.gpus_per_node):
            rank = node * JOB.gpus_per_node + local
            read = np.flatnonzero(~np.isnan(telemetry.gpu["power_w"][rank]))
            kwh += (energy[rank, read[-1]] - energy[rank, read[0]]) / 3.6e6
    return kwh, uuids


def _push_eval(collector: RunningCollector, now: float) -> dict[int, str]:
    """eval-3 on gpu-b01 for the last 30 minutes: GPUs 0 and 1 busy, 2 and 3 idle; GPU 3 at 91 °C."""
    origin = Origin("c", "r2", "gpu-b01", "nvml", str(uuid.uuid4()))
    gpus = [GpuIdentity(i, f"GPU-{uuid.uuid4()}", "A100", f"00:{i:02x}") for i in range(4)]
    snapshots = []
    for t in range(0, 1800, 10):
        readings = []
        for g in gpus:
            busy = g.index < 2
            values = {
                "util_pct": 85.0 if busy else 0.0,
                "power_w": 330.0 if busy else 60.0,
                "temp_c": 91.0 if g.index == 3 else 60.0,
                "fb_used_bytes": (30 if busy else 1) * GIB,
                "fb_total_bytes": 40.0 * GIB,
            }
            readings.append(GpuReading(g, True, values))
        jobs = {g.index: JobInfo("eval-3", "bob") for g in gpus}
        snapshots.append(Snapshot(ts=now - 1800 + t, gpus=tuple(readings), ports=(), jobs=jobs))
    for seq, lo in enumerate(range(0, len(snapshots), 60), start=1):
        push_binary(collector, origin, seq, snapshots[lo : lo + 60])
    return {g.index: g.uuid for g in gpus}


def _push_small_jobs(collector: RunningCollector, now: float) -> None:
    """prep-12, ended 20 minutes ago, and notebook-1, 40 s old, on gpu-b02; research/llama on gpu-c01."""
    b02 = Origin("c", "r2", "gpu-b02", "nvml", str(uuid.uuid4()))
    gpus = [GpuIdentity(i, f"GPU-{uuid.uuid4()}", "H100", f"00:{i:02x}") for i in range(2)]
    snapshots = []
    for t in range(0, 2400, 10):
        ts = now - 2400 + t
        jobs = {}
        if now - 2100 <= ts < now - 1200:
            jobs[0] = JobInfo("prep-12", "carol")
        if ts >= now - 40:
            jobs[1] = JobInfo("notebook-1", "dave")
        values = {"util_pct": 70.0, "sm_active_pct": 50.0, "tensor_active_pct": 20.0, "power_w": 400.0}
        readings = tuple(GpuReading(g, True, values) for g in gpus)
        snapshots.append(Snapshot(ts=ts, gpus=readings, ports=(), jobs=jobs))
    xid = [Event(now - 60, 1, "xid", 79)]  # fell off the bus
    for seq, lo in enumerate(range(0, len(snapshots), 60), start=1):
        push_binary(collector, b02, seq, snapshots[lo : lo + 60], xid if lo + 60 >= len(snapshots) else None)
    c01 = Origin("c", "r3", "gpu-c01", "k8s", str(uuid.uuid4()))
    pods = [GpuIdentity(i, f"GPU-{uuid.uuid4()}", "H100", f"00:{i:02x}") for i in range(2)]
    job = JobInfo("research/llama", None, "research", "llama-workers-0-0", "trainer", "JobSet/llama")
    values = {"util_pct": 95.0, "sm_active_pct": 80.0, "tensor_active_pct": 55.0, "power_w": 600.0}
    snapshots = [
        Snapshot(
            ts=now - 900 + t,
            gpus=tuple(GpuReading(g, True, values) for g in pods),
            ports=(),
            jobs=dict.fromkeys(range(2), job),
        )
        for t in range(0, 900, 10)
    ]
    push_binary(collector, c01, 1, snapshots[:60])
    push_binary(collector, c01, 2, snapshots[60:])
