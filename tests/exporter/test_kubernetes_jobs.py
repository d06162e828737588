"""Kubernetes attribution against a real gRPC server speaking the kubelet's pod-resources v1 API and a
real HTTP pod list: which pod holds each GPU or MIG device, how pods group into jobs, and a kubelet that
is slow, missing, or goes away and comes back."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from gpuscope.exporter.jobs.kubernetes import STALE_AFTER, KubernetesJobs
from gpuscope.exporter.jobs.pod_metadata import KubeletPods
from gpuscope.exporter.jobs.select import KubernetesOptions, open_jobs
from gpuscope.exporter.sampler import Sampler
from gpuscope.exporter.sim import JobSchedule, SimNodeSource, build_topology
from gpuscope.exporter.snapshot import GpuIdentity, JobInfo
from tests.k8s.fake_kubelet import Claim, ClaimDevice, Container, FakeKubelet, Pod
from tests.k8s.pod_list import PodListServer, pod, pod_list_server
from tests.waiting import eventually

UUIDS = [f"GPU-0000000{i}-1111-2222-3333-44444444444{i}" for i in range(4)]
GPUS = tuple(GpuIdentity(i, UUIDS[i], "NVIDIA H100 80GB HBM3", f"00000000:{0x18 + i:02X}:00.0") for i in range(4))


@pytest.fixture
def pods() -> Iterator[PodListServer]:
    with pod_list_server() as server:
        yield server


def listener(kubelet: FakeKubelet, pods: PodListServer | None = None, **kwargs: object) -> KubernetesJobs:
    metadata = KubeletPods(pods.url) if pods else None
    return KubernetesJobs(Path(kubelet.socket_path), metadata, interval=0.2, **kwargs)  # type: ignore[arg-type]


def test_gpus_are_attributed_to_the_pod_and_container_holding_them(fake_kubelet: FakeKubelet) -> None:
    fake_kubelet.set_pods(
        [
            Pod("train-0", "ml", [Container("main", {"nvidia.com/gpu": [UUIDS[0], UUIDS[2]]})]),
            Pod("nb", "users", [Container("sidecar"), Container("jupyter", {"nvidia.com/gpu": [UUIDS[1]]})]),
            Pod("nic", "net", [Container("c", {"rdma/hca": ["3"]})]),  # "3" is not GPU 3: not a GPU resource
        ]
    )
    jobs = listener(fake_kubelet)
    jobs.poll_once()
    found = jobs.assign(GPUS, time.time())
    assert found == {
        0: JobInfo("ml/train-0", None, "ml", "train-0", "main", "Pod/train-0"),
        2: JobInfo("ml/train-0", None, "ml", "train-0", "main", "Pod/train-0"),
        1: JobInfo("users/nb", None, "users", "nb", "jupyter", "Pod/nb"),
    }
    fake_kubelet.set_pods([Pod("nb", "users", [Container("jupyter", {"nvidia.com/gpu": [UUIDS[1]]})])])
    jobs.poll_once()
    assert set(jobs.assign(GPUS, time.time())) == {1}, "a pod that ended leaves its GPUs at the next poll"


@pytest.mark.parametrize(
    ("resource", "device_id", "gpu"),
    [
        ("nvidia.com/gpu", UUIDS[3].lower(), 3),  # case does not matter
        ("nvidia.com/gpu", f"{UUIDS[2]}::1", 2),  # time-slicing replica
        ("nvidia.com/gpu", "1", 1),  # --device-id-strategy=index
        ("amd.com/gpu", "0000:1a:00.0", 2),  # AMD's device plugin: the PCI address, 4-digit domain
        ("amd.com/gpu", "00000000:19:00.0", 1),
    ],
)
def test_device_plugins_name_gpus_in_several_ways(
    fake_kubelet: FakeKubelet, resource: str, device_id: str, gpu: int
) -> None:
    fake_kubelet.set_pods([Pod("p", "ns", [Container("c", {resource: [device_id]})])])
    jobs = listener(fake_kubelet)
    jobs.poll_once()
    assert set(jobs.assign(GPUS, time.time())) == {gpu}


def test_mig_devices_are_attributed_one_by_one(fake_kubelet: FakeKubelet) -> None:
    migs = {0: ("MIG-aaaa", "MIG-bbbb", "MIG-cccc")}
    fake_kubelet.set_pods(
        [
            Pod("a", "ml", [Container("c", {"nvidia.com/mig-1g.10gb": ["MIG-bbbb"]})]),  # mixed strategy
            Pod("b", "ml", [Container("c", {"nvidia.com/gpu": ["0:2"]})]),  # single strategy, index ids
        ]
    )
    jobs = listener(fake_kubelet)
    jobs.poll_once()
    found = jobs.assign_mig(migs, time.time())
    assert {uuid: job.pod for uuid, job in found.items()} == {"MIG-bbbb": "a", "MIG-cccc": "b"}
    assert jobs.assign(GPUS, time.time()) == {}, "holding a MIG slice is not holding the whole GPU"


def test_dra_claims_are_attributed_by_device_name_or_cdi_name(
    fake_kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
) -> None:
    by_name = ClaimDevice(["k8s.gpu.nvidia.com/claim=6c1e-gpu-1"], "gpu.nvidia.com", "node-a", "gpu-1")
    by_cdi = ClaimDevice([f"vendor.example/gpu={UUIDS[3]}"], "gpu.example", "node-a", "dev-7")
    mig = ClaimDevice([], "gpu.nvidia.com", "node-a", "gpu-2-mig-1g10gb-19-0")
    fake_kubelet.set_pods(
        [
            Pod("dra", "ml", [Container("c", claims=[Claim("gpus", "ml", [by_name, by_cdi])])]),
            Pod("slice", "ml", [Container("c", claims=[Claim("slice", "ml", [mig])])]),
        ]
    )
    jobs = listener(fake_kubelet)
    with caplog.at_level(logging.WARNING, "gpuscope.exporter.jobs.kubernetes"):
        jobs.poll_once()
        jobs.poll_once()
    assert {i: j.pod for i, j in jobs.assign(GPUS, time.time()).items()} == {1: "dra", 3: "dra"}
    said = [r.getMessage() for r in caplog.records if "gpu-2-mig" in r.getMessage()]
    assert len(said) == 1 and "not attributed" in said[0], "a MIG slice DRA cannot name is said once, not guessed"


def test_pods_of_one_workload_are_one_job(fake_kubelet: FakeKubelet, pods: PodListServer) -> None:
    jobset = {"jobset.sigs.k8s.io/jobset-name": "llama", "batch.kubernetes.io/job-name": "llama-workers-0"}
    pods.set_pods(
        [
            pod("llama-workers-0-0-abcde", "ml", jobset),
            pod("llama-workers-0-1-fghij", "ml", jobset),
            pod("pt-master-0", "ml", {"training.kubeflow.org/job-name": "bert"}, owner=("PyTorchJob", "bert")),
            pod("solo", "ml", annotations={"gpuscope.io/job": "sweep-42"}),
        ]
    )
    fake_kubelet.set_pods(
        [
            Pod("llama-workers-0-0-abcde", "ml", [Container("trainer", {"nvidia.com/gpu": [UUIDS[0]]})]),
            Pod("llama-workers-0-1-fghij", "ml", [Container("trainer", {"nvidia.com/gpu": [UUIDS[1]]})]),
            Pod("pt-master-0", "ml", [Container("pytorch", {"nvidia.com/gpu": [UUIDS[2]]})]),
            Pod("solo", "ml", [Container("c", {"nvidia.com/gpu": [UUIDS[3]]})]),
        ]
    )
    jobs = listener(fake_kubelet, pods)
    jobs.poll_once()
    found = jobs.assign(GPUS, time.time())
    assert [(found[i].job_id, found[i].workload) for i in range(4)] == [
        ("ml/llama", "JobSet/llama"),
        ("ml/llama", "JobSet/llama"),
        ("ml/bert", "PyTorchJob/bert"),
        ("ml/sweep-42", "job/sweep-42"),
    ]
    assert found[0].pod != found[1].pod, "one job, each GPU still knows its own pod"
    requests = pods.requests
    jobs.poll_once()
    jobs.poll_once()
    assert pods.requests == requests, "labels of pods already known are not fetched again"


def test_without_pod_labels_each_pod_is_its_own_job_and_it_is_said_once(
    fake_kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
) -> None:
    fake_kubelet.set_pods([Pod("w-0", "ml", [Container("c", {"nvidia.com/gpu": [UUIDS[0]]})])])
    jobs = KubernetesJobs(Path(fake_kubelet.socket_path), KubeletPods("http://127.0.0.1:9/pods"), interval=0.2)
    with caplog.at_level(logging.WARNING, "gpuscope.exporter.jobs.kubernetes"):
        for _ in range(3):
            jobs.poll_once()
    assert jobs.assign(GPUS, time.time())[0].job_id == "ml/w-0"
    said = [r.getMessage() for r in caplog.records if "no pod labels" in r.getMessage()]
    assert len(said) == 1 and "127.0.0.1:9" in said[0]


def test_a_slow_kubelet_never_delays_a_sampling_cycle(fake_kubelet: FakeKubelet) -> None:
    topology = build_topology(1, 4, 1, cluster="t")
    source = SimNodeSource(topology[0], JobSchedule(topology, 1), 1)
    uuids = [r.gpu.uuid for r in source.read(time.time())[0]]
    fake_kubelet.set_pods([Pod("p", "ns", [Container("c", {"nvidia.com/gpu": uuids[:2]})])])
    jobs = listener(fake_kubelet)
    sampler = Sampler(source, 0.2, jobs=jobs)
    stop = threading.Event()
    thread = threading.Thread(target=jobs.run, args=(stop,), daemon=True)
    thread.start()
    try:
        eventually(lambda: set(sampler.sample_once().jobs or {}) == {0, 1}, what="the pod attributed", timeout=5)
        fake_kubelet.set_delay(3.0, "List")  # every call now hangs until its deadline
        asked = len(fake_kubelet.calls("List"))
        eventually(lambda: len(fake_kubelet.calls("List")) > asked, what="the listener inside a slow call", timeout=5)
        cycles = []
        for _ in range(10):
            started = time.perf_counter()
            snapshot = sampler.sample_once()
            cycles.append(time.perf_counter() - started)
        assert max(cycles) < 0.1, f"a sampling cycle waited for the kubelet: {max(cycles):.3f} s"
        assert set(snapshot.jobs or {}) == {0, 1}, "the last answer stands while the kubelet is slow"
    finally:
        stop.set()
        fake_kubelet.set_delay(0.0, "List")
        thread.join(timeout=10)
    assert not thread.is_alive()


def test_socket_missing_at_start_then_gone_then_back_is_followed(
    kubelet_socket: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = [1000.0]
    kubelet = FakeKubelet(kubelet_socket)
    kubelet.set_pods([Pod("p", "ns", [Container("c", {"nvidia.com/gpu": [UUIDS[0]]})])])
    jobs = KubernetesJobs(Path(kubelet_socket), None, interval=0.2, monotonic=lambda: clock[0])
    with caplog.at_level(logging.INFO, "gpuscope.exporter.jobs.kubernetes"):
        for _ in range(3):
            jobs.poll_once()
        assert jobs.assign(GPUS, 0) == {}
        kubelet.start()
        try:
            jobs.poll_once()
            assert set(jobs.assign(GPUS, 0)) == {0}
            kubelet.stop()
            jobs.poll_once()
            assert set(jobs.assign(GPUS, 0)) == {0}, "a kubelet restarting does not end the pods' jobs"
            clock[0] += STALE_AFTER + 1
            assert jobs.assign(GPUS, 0) == {}, "a kubelet gone for long vouches for nothing"
            kubelet.set_pods([Pod("q", "ns", [Container("c", {"nvidia.com/gpu": [UUIDS[1]]})])])
            kubelet.start()
            started = time.monotonic()
            eventually(
                lambda: (jobs.poll_once(), set(jobs.assign(GPUS, 0)) == {1})[1], what="the kubelet followed", timeout=5
            )
            assert time.monotonic() - started < 3, "reconnecting waited out gRPC's long backoff"
        finally:
            kubelet.stop()
            jobs.close()
    said = [r.getMessage() for r in caplog.records]
    assert sum("is not there" in m for m in said) == 2, said  # at start, and once when it went away
    assert sum(m.startswith("jobs: Kubernetes (kubelet") for m in said) == 2, said


def test_a_kubelet_without_allocatable_listing_still_attributes(
    fake_kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
) -> None:
    fake_kubelet.disable("GetAllocatableResources", grpc.StatusCode.UNKNOWN)
    fake_kubelet.disable("Get")
    fake_kubelet.set_pods([Pod("p", "ns", [Container("c", {"nvidia.com/gpu": [UUIDS[2]]})])])
    jobs = listener(fake_kubelet)
    with caplog.at_level(logging.INFO, "gpuscope.exporter.jobs.kubernetes"):
        jobs.poll_once()
    assert set(jobs.assign(GPUS, 0)) == {2}
    assert any("does not list allocatable devices" in r.getMessage() for r in caplog.records)
    assert not fake_kubelet.calls("Get"), "List answers for every pod: no Get per pod"


def test_a_kubelet_listing_allocatable_devices_says_what_it_hands_out(
    fake_kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
) -> None:
    fake_kubelet.set_allocatable({"nvidia.com/gpu": UUIDS, "rdma/hca": ["0", "1"]})
    jobs = listener(fake_kubelet)
    with caplog.at_level(logging.INFO, "gpuscope.exporter.jobs.kubernetes"):
        jobs.poll_once()
        jobs.poll_once()
    said = [r.getMessage() for r in caplog.records if "hands out" in r.getMessage()]
    assert said == ["jobs: the kubelet hands out nvidia.com/gpu x4, rdma/hca x2"]


def test_the_kubelet_is_asked_once_a_cycle_just_before_it(fake_kubelet: FakeKubelet) -> None:
    clock = [100.0]
    jobs = KubernetesJobs(Path(fake_kubelet.socket_path), None, interval=5.0, monotonic=lambda: clock[0])
    assert jobs.until_next_poll() == 5.0, "before the first cycle: every interval"
    jobs.assign(GPUS, 0)  # a cycle at 100
    clock[0] = 100.1
    assert jobs.until_next_poll() == pytest.approx(4.65), "0.25 s before the cycle at 105"
    clock[0] = 104.9  # a slow List ran past the moment: aim at the cycle at 110
    assert jobs.until_next_poll() == pytest.approx(4.85)


def test_polls_follow_the_sampling_cycles_within_the_kubelets_rate_limit(fake_kubelet: FakeKubelet) -> None:
    fake_kubelet.set_pods([Pod("p", "ns", [Container("c", {"nvidia.com/gpu": [UUIDS[0]]})])])
    jobs = KubernetesJobs(Path(fake_kubelet.socket_path), None, interval=0.1)
    stop = threading.Event()
    thread = threading.Thread(target=jobs.run, args=(stop,), daemon=True)
    thread.start()
    cycles = 0
    started = time.monotonic()
    while time.monotonic() - started < 1.5:
        found = jobs.assign(GPUS, 0)
        cycles += 1
        time.sleep(0.1 - (time.monotonic() - started) % 0.1)
    stop.set()
    thread.join(timeout=5)
    assert abs(jobs.polls - cycles) <= 2, (jobs.polls, cycles)
    assert set(found) == {0} and not fake_kubelet.calls("Get")


def test_auto_picks_kubernetes_where_the_socket_is_and_slurm_is_not(fake_kubelet: FakeKubelet, tmp_path: Path) -> None:
    options = KubernetesOptions(node="node-a", socket=Path(fake_kubelet.socket_path), pod_metadata="none")
    source = SimNodeSource(build_topology(1, 1, 1)[0], JobSchedule(build_topology(1, 1, 1), 0), 0)
    picked = open_jobs("auto", source, tmp_path / "no-slurm", tmp_path / "cgroup", kubernetes=options)
    assert isinstance(picked, KubernetesJobs)
    (tmp_path / "slurm").mkdir()
    picked = open_jobs("auto", source, tmp_path / "slurm", tmp_path / "cgroup", kubernetes=options)
    assert not isinstance(picked, KubernetesJobs), "slurmd in pods: Slurm knows the jobs, the kubelet the pods"
    gone = KubernetesOptions(node="node-a", socket=tmp_path / "none.sock")
    assert open_jobs("auto", source, tmp_path / "no-slurm", tmp_path / "cgroup", kubernetes=gone) is None


def test_an_answer_that_is_not_pod_resources_is_said_once_and_changes_nothing(
    fake_kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
) -> None:
    fake_kubelet.set_pods([Pod("p", "ns", [Container("c", {"nvidia.com/gpu": [UUIDS[0]]})])])
    jobs = listener(fake_kubelet)
    jobs.poll_once()
    pb2 = fake_kubelet.protos.pb2
    # an unknown field sent as a group (wire types 3 and 4), which protobuf keeps and sends on and the v1 API
    # never uses: the kind of answer a kubelet bug or another server on the socket could give
    odd = pb2.PodResources.FromString(pb2.PodResources(name="q", namespace="ns").SerializeToString() + b"\x7b\x7c")
    with caplog.at_level(logging.INFO):
        fake_kubelet.set_pods([odd])
        for _ in range(3):
            jobs.poll_once()
    said = [r for r in caplog.records if "not understood" in r.getMessage()]
    assert len(said) == 1 and not any(r.exc_info for r in caplog.records), "one line, no traceback"
    assert set(jobs.assign(GPUS, 0)) == {0}, "the last answer understood stands"
