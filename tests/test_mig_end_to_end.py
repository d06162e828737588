"""MIG end to end: a node with one whole GPU and one split into MIG devices (the fake NVML), pods holding a
MIG slice and the whole GPU (a fake kubelet: a real gRPC server speaking pod-resources v1), the exporter's
sampler and wire encoding, a real collector and PostgreSQL, and the read API.

The slice's pod is a job of its own, attributed to that MIG device with its parent GPU; its usage is its
GPU instance's activity, its GPU-hours its share of the GPU's slices; its allocation ends when the pod
does; the heatmap shows the MIG GPU's activity (NVML has no utilisation in MIG mode: that stays a gap)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psycopg
import pytest

from gpuscope.exporter.jobs.kubernetes import KubernetesJobs
from gpuscope.exporter.sampler import Sampler
from gpuscope.exporter.sources.nvml import NvmlSource
from gpuscope.exporter.testing.fake_nvml import FakeGpu, h100_node, make_fake_pynvml, mig_layout
from gpuscope.exporter.wire import Origin
from tests.collector.helpers import push_binary
from tests.k8s.fake_kubelet import Container, FakeKubelet, Pod, short_socket_path
from tests.processes import RunningCollector

INTERVAL = 10.0  # simulated seconds between cycles


class Node:
    """The exporter's parts on one node: NVML (fake), the kubelet listener, the sampler, the pushes."""

    def __init__(self, gpus: list[FakeGpu], kubelet: FakeKubelet) -> None:
        self.source = NvmlSource(make_fake_pynvml(gpus), xid_events=False)
        self.jobs = KubernetesJobs(Path(kubelet.socket_path), None, interval=0.2)
        self.sampler = Sampler(self.source, interval=INTERVAL, jobs=self.jobs)
        self.origin = Origin("c", "r1", "mig-node", "nvml", str(uuid.uuid4()))
        self.seq = 0
        self.ts = time.time() - 600

    def push(self, collector: RunningCollector, cycles: int) -> None:
        self.jobs.poll_once()
        snapshots = []
        for _ in range(cycles):
            self.ts += INTERVAL
            snapshots.append(self.sampler.sample_once(self.ts))
        self.seq += 1
        push_binary(collector, self.origin, self.seq, snapshots)

    def close(self) -> None:
        self.jobs.close()
        self.source.close()


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    with short_socket_path() as socket, FakeKubelet(socket) as kubelet:
        yield kubelet


@pytest.fixture
def node(kubelet: FakeKubelet) -> Iterator[tuple[Node, list[FakeGpu]]]:
    gpus = h100_node(2)
    mig_layout(gpus[1], ["3g.40gb", "1g.10gb", "1g.10gb"])
    gpus[1].mig_devices[1].gpm_sm_util, gpus[1].mig_devices[1].gpm_tensor_util = 30.0, 10.0
    kubelet.set_pods(
        [
            Pod("train-0", "ml", [Container("main", {"nvidia.com/gpu": [gpus[0].uuid]})]),
            Pod("infer-a", "serve", [Container("server", {"nvidia.com/mig-1g.10gb": [gpus[1].mig_devices[1].uuid]})]),
        ]
    )
    node = Node(gpus, kubelet)
    yield node, gpus
    node.close()


def test_a_pod_on_a_mig_slice_is_a_job_on_that_instance(
    collector: RunningCollector, node: tuple[Node, list[FakeGpu]], kubelet: FakeKubelet
) -> None:
    exporter, gpus = node
    exporter.push(collector, cycles=7)  # GPM reports from the second cycle: six rows of activity
    with psycopg.connect(collector.dsn) as conn:
        held = conn.execute(
            "SELECT a.job_id, a.pod, g.gpu_index, m.uuid, m.profile FROM job_allocation a JOIN gpu g USING (gpu_id)"
            " LEFT JOIN mig_device m ON m.mig_id = a.mig_id ORDER BY a.job_id"
        ).fetchall()
    assert held == [
        ("ml/train-0", "train-0", 0, None, None),
        ("serve/infer-a", "infer-a", 1, gpus[1].mig_devices[1].uuid, "1g.10gb"),
    ], "the slice's pod holds that MIG device of GPU 1, and nothing holds GPU 1 whole"

    detail = httpx.get(f"{collector.url}/api/v1/jobs/serve/infer-a", timeout=10).json()
    [held_gpu] = detail["gpus"]
    assert held_gpu["gpu"]["gpu"] == 1 and held_gpu["gpu"]["uuid"] == gpus[1].uuid
    assert held_gpu["mig"] == {
        "uuid": gpus[1].mig_devices[1].uuid,
        "gpu_instance_id": 2,
        "compute_instance_id": 0,
        "profile": "1g.10gb",
        "slices": 1,
        "gpu_slices": 7,
    }
    usage = held_gpu["usage"]
    assert usage["mean_sm_active_pct"] == pytest.approx(30.0) and usage["mean_tensor_active_pct"] == pytest.approx(10.0)
    assert usage["mean_util_pct"] is None and usage["mean_power_w"] is None, "no figure of the shared board"
    job = detail["job"]
    assert job["mig_devices"] == 1 and job["gpus"] == 1
    # From the first sample to now: 1/7 of a GPU for that long.
    started = datetime.fromisoformat(job["started_at"])
    hours = (datetime.now(UTC) - started).total_seconds() / 3600
    assert job["gpu_hours"] == pytest.approx(hours / 7, rel=0.05)

    kubelet.set_pods([Pod("train-0", "ml", [Container("main", {"nvidia.com/gpu": [gpus[0].uuid]})])])
    exporter.push(collector, cycles=2)
    with psycopg.connect(collector.dsn) as conn:
        [(ended, last_seen)] = conn.execute(
            "SELECT extract(epoch FROM ended_at), extract(epoch FROM last_seen) FROM job_allocation"
            " WHERE job_id = 'serve/infer-a'"
        ).fetchall()
        whole_open = conn.execute(
            "SELECT count(*) FROM job_allocation WHERE job_id = 'ml/train-0' AND ended_at IS NULL"
        ).fetchone()
    assert float(ended) == pytest.approx(exporter.ts - INTERVAL, abs=1e-3), "ended at the first cycle without it"
    assert float(last_seen) == pytest.approx(exporter.ts - 2 * INTERVAL, abs=1e-3)
    assert whole_open == (1,), "the whole GPU's job goes on"


def test_the_heatmap_shows_a_mig_gpus_activity_and_no_utilisation(
    collector: RunningCollector, node: tuple[Node, list[FakeGpu]]
) -> None:
    exporter, _ = node
    exporter.push(collector, cycles=7)
    params = {"minutes": 15, "bucket_seconds": 60}
    maps = {
        metric: httpx.get(f"{collector.url}/api/v1/heatmap", params={**params, "metric": metric}, timeout=10).json()
        for metric in ("sm_active_pct", "util_pct")
    }
    for metric, heatmap in maps.items():
        assert [g["gpu"] for g in heatmap["gpus"]] == [0, 1], metric
    mig_row = [v for v in maps["sm_active_pct"]["values"][1] if v is not None]
    assert mig_row, "the MIG GPU has SM activity in the heatmap"
    assert all(v is None for v in maps["util_pct"]["values"][1]), "no utilisation is made up for it"
    assert any(v is not None for v in maps["util_pct"]["values"][0])
