"""Kubernetes attribution end to end: a fake kubelet (a real gRPC server speaking pod-resources v1) and a
pod list over HTTP, the exporter, a real collector and PostgreSQL.

1. `gpuscope exporter --jobs k8s` as a process: pods of a JobSet start and end, and their allocations start
   and end within one sampling interval of the kubelet saying so; the read API and /metrics show the pods.
2. A two-pod JobSet training across two nodes with a GPU running hot: the exporter's own listener, sampler
   and wire encoding carry its telemetry into the collector, and the straggler watch finds the GPU in the
   JobSet's job, which the read API shows with its namespace, workload and pods.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psycopg
import pytest

from gpuscope.core.listen import free_loopback_port
from gpuscope.exporter.jobs.kubernetes import KubernetesJobs
from gpuscope.exporter.jobs.pod_metadata import KubeletPods
from gpuscope.exporter.sampler import Sampler
from gpuscope.exporter.sim.training import Fault, simulate
from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, PortIdentity, PortReading
from gpuscope.exporter.wire import Origin
from gpuscope.stragglers.watch import StragglerWatch
from tests.collector.helpers import push_binary
from tests.commands import GPUSCOPE, stop_process, token_file, wait_healthy
from tests.k8s.fake_kubelet import Container, FakeKubelet, Pod, short_socket_path
from tests.k8s.pod_list import pod, pod_list_server
from tests.processes import RunningCollector
from tests.stragglers.helpers import HISTORY_S, JOB, watch
from tests.waiting import eventually

INTERVAL = 0.5
# The listener asks the kubelet just before each cycle (exporter/jobs/kubernetes.py); the rest is this
# machine's scheduling jitter.
WITHIN = INTERVAL + 0.05 + 0.4
JOBSET = {"jobset.sigs.k8s.io/jobset-name": "train", "batch.kubernetes.io/job-name": "train-workers-0"}


@pytest.fixture
def exporter(collector: RunningCollector, tmp_path: Path) -> Iterator[tuple[FakeKubelet, str, str]]:
    """`gpuscope exporter --jobs k8s` on 4 simulated GPUs, pushing to the collector: (kubelet, metrics URL,
    pod-list URL)."""
    port = free_loopback_port()
    with short_socket_path() as socket, FakeKubelet(socket) as kubelet, pod_list_server() as pods:
        pods.set_pods([pod(f"train-workers-0-{i}", "ml", JOBSET, owner=("Job", "train-workers-0")) for i in (0, 1)])
        command = [*GPUSCOPE, "exporter", "--backend", "sim", "--sim-gpus", "4", "--node", "k8s-node-a"]
        command += ["--listen", f"127.0.0.1:{port}", "--interval", str(INTERVAL), "--push-interval", "0"]
        command += ["--push", collector.url, "--token-file", str(token_file(tmp_path / "token", collector.token))]
        command += ["--jobs", "k8s", "--pod-resources-socket", socket, "--pod-metadata", "kubelet"]
        command += ["--kubelet-pods-url", pods.url, "--dcgm-compat"]
        process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            wait_healthy(f"http://127.0.0.1:{port}", timeout=30, process=process)
            yield kubelet, f"http://127.0.0.1:{port}/metrics", pods.url
        finally:
            stop_process(process)
            assert process.stderr is not None
            log = process.stderr.read().decode()
    assert "jobs: Kubernetes" in log, log


def _uuids(dsn: str, node: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT g.uuid FROM gpu g JOIN node n USING (node_id) WHERE n.name = %s ORDER BY g.gpu_index", (node,)
        ).fetchall()
    return [r[0] for r in rows]


def _allocations(dsn: str) -> list[tuple[int, str, str, str, str, str, datetime, datetime | None]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(  # type: ignore[return-value]
            "SELECT g.gpu_index, a.job_id, a.namespace, a.pod, a.container, a.workload, a.started_at, a.ended_at"
            " FROM job_allocation a JOIN gpu g USING (gpu_id) ORDER BY g.gpu_index, a.started_at"
        ).fetchall()


def test_pods_starting_and_ending_are_allocations_exact_to_one_interval(
    collector: RunningCollector, exporter: tuple[FakeKubelet, str, str]
) -> None:
    kubelet, metrics, _ = exporter
    uuids = eventually(lambda: _uuids(collector.dsn, "k8s-node-a"), what="the exporter's GPUs stored", timeout=30)
    assert len(uuids) == 4
    holders = [
        Pod("train-workers-0-0", "ml", [Container("trainer", {"nvidia.com/gpu": uuids[:2]})]),
        Pod("train-workers-0-1", "ml", [Container("trainer", {"nvidia.com/gpu": uuids[2:]})]),
    ]
    started = time.time()
    kubelet.set_pods(holders)
    eventually(lambda: len(_allocations(collector.dsn)) == 4, what="four allocations", timeout=20)
    time.sleep(1.5)  # the pods hold their GPUs a while: the allocations' spans are checked against it
    ended = time.time()
    kubelet.set_pods(holders[1:])
    eventually(lambda: sum(a[7] is not None for a in _allocations(collector.dsn)) == 2, what="two ended", timeout=20)
    allocations = _allocations(collector.dsn)
    for gpu, job_id, namespace, pod_name, container, workload, start, end in allocations:
        assert (job_id, namespace, container, workload) == ("ml/train", "ml", "trainer", "JobSet/train")
        assert pod_name == f"train-workers-0-{gpu // 2}"
        assert started <= start.timestamp() <= started + WITHIN, (gpu, start.timestamp() - started)
        if gpu < 2:
            assert end is not None and ended <= end.timestamp() <= ended + WITHIN, (gpu, end)
        else:
            assert end is None

    [job] = httpx.get(f"{collector.url}/api/v1/jobs", params={"namespace": "ml", "minutes": 30}, timeout=10).json()
    assert (job["job_id"], job["namespace"], job["workload"]) == ("ml/train", "ml", "JobSet/train")
    assert job["pods"] == ["train-workers-0-0", "train-workers-0-1"] and job["state"] == "running"
    assert httpx.get(f"{collector.url}/api/v1/jobs", params={"namespace": "other"}, timeout=10).json() == []
    for path in ("ml/train", "ml%2Ftrain"):
        detail = httpx.get(f"{collector.url}/api/v1/jobs/{path}", timeout=10)
        assert detail.status_code == 200, (path, detail.text)
        assert {(g["gpu"]["gpu"], g["pod"]) for g in detail.json()["gpus"] if g["ended_at"] is None} == {
            (2, "train-workers-0-1"),
            (3, "train-workers-0-1"),
        }

    text = httpx.get(metrics, timeout=10).text
    assert 'gpu="2"' in text and 'pod="train-workers-0-1",namespace="ml",container="trainer"' in text
    assert 'workload="JobSet/train"' in text and "hpc_job" not in text


def _training_readings(node: int, uuids: list[str], telemetry: object, i: int) -> tuple[GpuReading, ...]:
    readings = []
    for local, gpu_uuid in enumerate(uuids):
        rank = node * JOB.gpus_per_node + local
        values = {k: float(v[rank, i]) for k, v in telemetry.gpu.items() if v[rank, i] == v[rank, i]}  # type: ignore[attr-defined]
        identity = GpuIdentity(local, gpu_uuid, "NVIDIA H100 80GB HBM3", f"00000000:{0x18 + local:02X}:00.0")
        readings.append(GpuReading(identity, True, values=values))
    return tuple(readings)


class _Replay:
    """A source answering one node's share of simulated training telemetry at the time asked."""

    name = "sim"

    def __init__(self, node: int, uuids: list[str], telemetry: object, start: float) -> None:
        self._node, self._uuids, self._telemetry, self._start = node, uuids, telemetry, start
        self._times = list(telemetry.times)  # type: ignore[attr-defined]

    def read(self, now: float) -> tuple[tuple[GpuReading, ...], tuple[PortReading, ...]]:
        i = self._times.index(round(now - self._start, 6))
        nic = {k: float(v[self._node, i]) for k, v in self._telemetry.nic.items()}  # type: ignore[attr-defined]
        return _training_readings(self._node, self._uuids, self._telemetry, i), (
            PortReading(PortIdentity("mlx5_0", 1), nic),
        )

    def close(self) -> None:
        pass


def test_a_jobset_straggler_is_found_in_its_job_and_shown_with_its_pods(collector: RunningCollector) -> None:
    fault = Fault("thermal", 1, 2, onset_s=1500.0, end_s=2100.0, severity=0.2)
    telemetry = simulate(JOB, [fault], HISTORY_S)
    start = float(int(time.time() - HISTORY_S - 20))
    labels = {"jobset.sigs.k8s.io/jobset-name": "llama", "jobset.sigs.k8s.io/replicatedjob-name": "workers"}
    with pod_list_server() as pods:
        pods.set_pods([pod(f"llama-workers-0-{n}", "research", labels) for n in range(JOB.nodes)])
        for node in range(JOB.nodes):
            uuids = [f"GPU-{uuid.UUID(int=node * 16 + i + 1)}" for i in range(JOB.gpus_per_node)]
            pod_on_node = Pod(f"llama-workers-0-{node}", "research", [Container("trainer", {"nvidia.com/gpu": uuids})])
            with short_socket_path() as socket, FakeKubelet(socket, rate_limit=None) as kubelet:
                kubelet.set_pods([pod_on_node])
                listener = KubernetesJobs(Path(socket), KubeletPods(pods.url), interval=5.0)
                sampler = Sampler(_Replay(node, uuids, telemetry, start), 5.0, jobs=listener)  # type: ignore[arg-type]
                origin = Origin("c", "r1", f"gpu-node-{node}", "sim", str(uuid.uuid4()))
                snapshots = []
                for n, t in enumerate(telemetry.times):
                    if n % 60 == 0:
                        listener.poll_once()  # what its thread does before each cycle
                    snapshots.append(sampler.sample_once(now=start + float(t)))
                listener.close()
            for seq, lo in enumerate(range(0, len(snapshots), 60), start=1):
                push_binary(collector, origin, seq, snapshots[lo : lo + 60])

    watch(collector.dsn, StragglerWatch(), datetime.fromtimestamp(start + HISTORY_S + 20, UTC))
    [found] = httpx.get(f"{collector.url}/api/v1/stragglers", params={"minutes": 60}, timeout=10).json()
    where = (found["job_id"], found["node"], found["gpu"], found["cause"])
    assert where == ("research/llama", "gpu-node-1", 2, "thermal")
    [job] = httpx.get(f"{collector.url}/api/v1/jobs", params={"minutes": 60}, timeout=10).json()
    assert (job["job_id"], job["namespace"], job["workload"], job["gpus"]) == (
        "research/llama",
        "research",
        "JobSet/llama",
        8,
    )
    assert job["nodes"] == ["gpu-node-0", "gpu-node-1"]
    assert job["pods"] == ["llama-workers-0-0", "llama-workers-0-1"]
