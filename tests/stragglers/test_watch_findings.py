"""The straggler watch on jobs that share a cluster, through a real collector and database:

- a job slowed by another job's traffic (every one of its ports waits, one of its nodes is shared with
  the other job, whose traffic tripled) gets a finding about the whole job naming that job, and no rank
  of it is blamed;
- inference replicas are judged independent and get nothing;
- each job's judging model is stored and served with the job.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

import httpx
import numpy as np
import psycopg

from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, JobInfo, PortIdentity, PortReading, Snapshot
from gpuscope.exporter.wire import Origin
from gpuscope.stragglers.watch import StragglerWatch
from tests.collector.helpers import push_binary
from tests.processes import RunningCollector
from tests.stragglers.helpers import watch
from tests.stragglers.models import Lockstep, Telemetry, cumulative, replicas

HISTORY_S, ONSET_S = 3000.0, 2400.0
GPUS = 4  # per job per node; a shared node has 2 x GPUS


def _gpu(tel: Telemetry, rank: int, i: int) -> dict[str, float]:
    return {
        "tensor_active_pct": float(tel.tensor[rank, i]),
        "sm_active_pct": float(tel.sm[rank, i]),
        "util_pct": float(tel.util[rank, i]),
        "power_w": float(tel.power[rank, i]),
        "sm_clock_mhz": float(tel.clock[rank, i]),
        "clock_event_reasons": float(tel.reasons[rank, i]),
    }


def _push_node(
    collector: RunningCollector,
    node: str,
    start: float,
    held: list[tuple[str, Telemetry, int]],  # (job, its telemetry, its node index) for the node's GPUs
    port: tuple[np.ndarray, np.ndarray],  # the node's NIC: cumulative bytes sent, wait ticks
) -> None:
    origin = Origin("c", "r1", node, "sim", str(uuid.uuid4()))
    gpus = [GpuIdentity(i, f"GPU-{node}-{i}", "H100", f"00:{i:02x}") for i in range(GPUS * len(held))]
    jobs = {g.index: JobInfo(held[g.index // GPUS][0], "alice") for g in gpus}
    times = held[0][1].t
    snapshots = []
    for i, t in enumerate(times):
        readings = []
        for g in gpus:
            _, tel, index = held[g.index // GPUS]
            readings.append(GpuReading(g, True, values=_gpu(tel, index * GPUS + g.index % GPUS, i)))
        nic = {"xmit_bytes": float(port[0][i]), "xmit_wait": float(port[1][i]), "rate_gbps": 400.0}
        snapshots.append(
            Snapshot(
                ts=start + t, gpus=tuple(readings), ports=(PortReading(PortIdentity("mlx5_0", 1), nic),), jobs=jobs
            )
        )
    for seq, lo in enumerate(range(0, len(snapshots), 100), start=1):
        push_binary(collector, origin, seq, snapshots[lo : lo + 100])


def test_a_neighbours_traffic_is_named_and_replicas_are_not_judged(collector: RunningCollector) -> None:
    start = time.time() - HISTORY_S - 20
    victim = Lockstep(nodes=4, gpus=GPUS, duration_s=HISTORY_S)
    during = victim.between(ONSET_S, HISTORY_S + 1)
    victim.comm[during] *= 3
    victim.waits[:, during] = 0.3
    aggressor = Lockstep(nodes=2, gpus=GPUS, duration_s=HISTORY_S)
    aggressor.extra_sent[:, during] = 2e9  # an all-to-all phase: twice the bytes it sends in steps
    victim_tel, aggressor_tel = victim.telemetry(seed=3), aggressor.telemetry(seed=4)
    serving = replicas(nodes=3, gpus=GPUS, duration_s=HISTORY_S)
    for n in range(3):  # the victim's own nodes
        port = (cumulative(victim_tel.sent[n : n + 1])[0], cumulative(victim_tel.wait[n : n + 1])[0])
        _push_node(collector, f"v{n}", start, [("victim", victim_tel, n)], port)
    # The shared node: its NIC carries both jobs' bytes, and waits as the victim's other ports do.
    shared_sent = cumulative(victim_tel.sent[3:4] + aggressor_tel.sent[0:1])[0]
    _push_node(
        collector,
        "shared",
        start,
        [("victim", victim_tel, 3), ("aggressor", aggressor_tel, 0)],
        (shared_sent, cumulative(victim_tel.wait[3:4])[0]),
    )
    _push_node(
        collector,
        "a1",
        start,
        [("aggressor", aggressor_tel, 1)],
        (cumulative(aggressor_tel.sent[1:2])[0], cumulative(aggressor_tel.wait[1:2])[0]),
    )
    for n in range(3):
        _push_node(
            collector,
            f"s{n}",
            start,
            [("serving", serving, n)],
            (cumulative(serving.sent[n : n + 1])[0], cumulative(serving.wait[n : n + 1])[0]),
        )

    now = datetime.fromtimestamp(start + HISTORY_S + 20, UTC)
    watch(collector.dsn, StragglerWatch(), now)

    found = httpx.get(f"{collector.url}/api/v1/stragglers", params={"minutes": 120}, timeout=10).json()
    assert [(s["job_id"], s["node"], s["gpu"], s["cause"], s["aggressor_job"]) for s in found] == [
        ("victim", None, None, "fabric", "aggressor")
    ]
    [finding] = found
    assert 0.3 <= finding["slowdown"] <= 0.5  # steps 3.0 s -> 4.2 s
    assert finding["ended_at"] is None and finding["gpu_hours_lost"] > 0
    with psycopg.connect(collector.dsn) as conn:
        models = dict(conn.execute("SELECT job_id, model FROM straggler_job_model").fetchall())
    assert models == {"victim": "synchronous", "aggressor": "synchronous", "serving": "independent"}
    served = httpx.get(f"{collector.url}/api/v1/jobs/serving", timeout=10).json()["straggler_model"]
    assert served["model"] == "independent" and "not judged" in served["words"]
    # The cost report counts the finding against the job, not against a node.
    report = httpx.get(
        f"{collector.url}/api/v1/reports/stragglers", params={"by": "node", "minutes": 120}, timeout=10
    ).json()
    assert [row["key"] for row in report["rows"]] == ["c: the fabric"]
