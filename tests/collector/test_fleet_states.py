"""The fleet's headline over the read API: each GPU counted once as working, idle in a job, free or
unhealthy, from its latest sample, its job and its recent XIDs, against a real collector and PostgreSQL."""

from __future__ import annotations

import time
import uuid

import httpx
import psycopg
import pytest

from gpuscope.collector import query
from gpuscope.exporter.events import Event
from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, JobInfo, Snapshot
from gpuscope.exporter.wire import Origin
from tests.collector.helpers import push_binary
from tests.processes import RunningCollector

BUSY = {"util_pct": 99.0, "sm_active_pct": 70.0, "tensor_active_pct": 40.0, "power_w": 600.0}
WAITING = {"util_pct": 98.0, "sm_active_pct": 30.0, "tensor_active_pct": 10.0, "power_w": 300.0}
IDLE = {"util_pct": 0.0, "sm_active_pct": 0.0, "tensor_active_pct": 0.0, "power_w": 70.0}


def gpu(index: int, values: dict[str, float], up: bool = True) -> GpuReading:
    identity = GpuIdentity(index, f"GPU-{uuid.uuid4()}", "NVIDIA H100 80GB HBM3", f"00000000:{index + 16:02X}:00.0")
    return GpuReading(identity, up, values)


def fleet(collector: RunningCollector) -> dict:
    response = httpx.get(f"{collector.url}/api/v1/fleet", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def test_each_gpu_is_in_exactly_one_state(collector: RunningCollector) -> None:
    now = time.time()
    readings = (
        gpu(0, BUSY),  # working
        gpu(1, WAITING),  # waiting for its peers in NCCL: still working
        gpu(2, IDLE),  # idle in a job
        gpu(3, {"util_pct": 2.0, "power_w": 70.0}),  # no SM activity on this GPU: idle by its utilisation
        gpu(4, IDLE),  # free
        gpu(5, {**BUSY, "remap_pending": 1.0}),  # in a job, but needs a reset
        gpu(6, IDLE, up=False),  # down
        gpu(7, BUSY),  # an XID 79 a minute ago: unhealthy though busy
    )
    jobs = {i: JobInfo("j1", "alice") for i in (0, 1, 2, 3, 5, 6, 7)}
    snapshot = Snapshot(ts=now, gpus=readings, ports=(), jobs=jobs)
    push_binary(
        collector, Origin("c", "r1", "n1", "sim", str(uuid.uuid4())), 1, [snapshot], [Event(now - 60, 7, "xid", 79)]
    )

    summary = fleet(collector)
    assert summary["gpus_known"] == 8
    assert summary["gpus_working"] == 2
    assert summary["gpus_idle_in_job"] == 2
    assert summary["gpus_free"] == 1
    assert summary["gpus_unhealthy"] == 3
    states = ("gpus_working", "gpus_idle_in_job", "gpus_free", "gpus_unhealthy")
    assert sum(summary[s] for s in states) == summary["gpus_known"]
    # The activity headline is the working GPUs' (GPUs 0 and 1), not diluted by idle ones.
    assert summary["mean_sm_active_pct"] == pytest.approx(50.0)
    assert summary["mean_tensor_active_pct"] == pytest.approx(25.0)
    _overview_agrees(collector)


def test_a_silent_gpu_is_unhealthy_and_says_why(collector: RunningCollector) -> None:
    old = time.time() - 600  # its only sample is ten minutes old
    origin = Origin("c", "r1", "n2", "sim", str(uuid.uuid4()))
    push_binary(collector, origin, 1, [Snapshot(ts=old, gpus=(gpu(0, BUSY),), ports=())])
    now = time.time()
    fresh = Origin("c", "r1", "n3", "sim", str(uuid.uuid4()))
    pending = gpu(1, {**IDLE, "remap_pending": 1.0})
    push_binary(collector, fresh, 1, [Snapshot(ts=now, gpus=(gpu(0, IDLE), pending), ports=())])

    summary = fleet(collector)
    assert (summary["gpus_known"], summary["gpus_reporting"], summary["gpus_unhealthy"]) == (3, 2, 2)
    assert summary["gpus_free"] == 1

    with psycopg.connect(collector.dsn) as conn:
        reasons = {(g.node, g.gpu_index): g.reason for g in query.unhealthy_gpus(conn)}
    assert reasons == {("n2", 0): "not reporting", ("n3", 1): "row remap pending: needs a reset"}
    _overview_agrees(collector)


def _overview_agrees(collector: RunningCollector) -> None:
    """The overview's one statement (dashboard/data.py) answers as the three reads it stands for."""
    with psycopg.connect(collector.dsn) as conn:
        together = query.fleet_overview(conn, unhealthy_limit=50, idle_limit=2)
        apart = (query.fleet_summary(conn), query.unhealthy_gpus(conn, 50), query.jobs_with_idle_gpus(conn, 2))
    assert together == apart
