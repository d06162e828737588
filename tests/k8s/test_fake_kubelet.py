"""The fake kubelet is a faithful pod-resources v1 server: checked with the generated client over its unix socket."""

from __future__ import annotations

import os
import stat
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from tests.k8s.fake_kubelet import (
    KUBELET_RATE_LIMIT,
    Claim,
    ClaimDevice,
    Container,
    FakeKubelet,
    Pod,
)
from tests.k8s.protos import load

pb2 = load().pb2
pb2_grpc = load().pb2_grpc

TIMEOUT = 5.0  # seconds: every call has a deadline, so no test can hang on the server

TRAINER = Pod(
    "trainer-0",
    "ml",
    [
        Container("main", {"nvidia.com/gpu": ["GPU-6f1c2d3e-0000-1111-2222-333344445555", "GPU-b2"]}, cpu_ids=[2, 3]),
        Container("sidecar"),
    ],
)
MIG_POD = Pod("notebook", "users", [Container("jupyter", {"nvidia.com/mig-1g.10gb": ["MIG-9a8b7c6d-aaaa"]})])
AMD_POD = Pod("rocm-job", "hpc", [Container("run", {"amd.com/gpu": ["0000:c1:00.0", "0000:c2:00.0"]})])
DRA_POD = Pod(
    "dra-pod",
    "ml",
    [
        Container(
            "ctr",
            claims=[
                Claim(
                    "gpu-claim",
                    "ml",
                    [
                        ClaimDevice(
                            ["k8s.gpu.nvidia.com/device=gpu-0"], driver="gpu.nvidia.com", pool="node-a", device="gpu-0"
                        ),
                        ClaimDevice(
                            ["k8s.gpu.nvidia.com/device=gpu-1", "k8s.gpu.nvidia.com/device=gpu-1-mps"],
                            driver="gpu.nvidia.com",
                            pool="node-a",
                            device="gpu-1",
                            share_id="6b2e0f5c-share",
                        ),
                    ],
                )
            ],
        )
    ],
)


@pytest.fixture
def channel(fake_kubelet: FakeKubelet) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(fake_kubelet.target) as channel:
        yield channel


@pytest.fixture
def client(channel: grpc.Channel) -> Any:
    return pb2_grpc.PodResourcesListerStub(channel)


def list_pods(client: Any, **kwargs: Any) -> Any:
    return client.List(pb2.ListPodResourcesRequest(), timeout=kwargs.pop("timeout", TIMEOUT), **kwargs)


def devices_by_resource(devices: Any) -> dict[str, list[str]]:
    """What a client makes of the kubelet's one-entry-per-device lists."""
    out: dict[str, list[str]] = defaultdict(list)
    for entry in devices:
        out[entry.resource_name].extend(entry.device_ids)
    return dict(out)


def rpc_error(call: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


def test_list_returns_the_pods_set(fake_kubelet: FakeKubelet, client: Any) -> None:
    assert list(list_pods(client).pod_resources) == []

    fake_kubelet.set_pods([TRAINER, MIG_POD, AMD_POD])
    pods = list_pods(client).pod_resources

    assert [(p.name, p.namespace) for p in pods] == [("trainer-0", "ml"), ("notebook", "users"), ("rocm-job", "hpc")]
    main, sidecar = pods[0].containers
    assert (main.name, sidecar.name) == ("main", "sidecar")
    # like the kubelet: one ContainerDevices per device id, not one per resource name
    assert [list(d.device_ids) for d in main.devices] == [["GPU-6f1c2d3e-0000-1111-2222-333344445555"], ["GPU-b2"]]
    assert devices_by_resource(main.devices) == {
        "nvidia.com/gpu": ["GPU-6f1c2d3e-0000-1111-2222-333344445555", "GPU-b2"]
    }
    assert not main.devices[0].HasField("topology")
    assert list(main.cpu_ids) == [2, 3]
    assert list(sidecar.devices) == [] and list(sidecar.dynamic_resources) == []
    assert devices_by_resource(pods[1].containers[0].devices) == {"nvidia.com/mig-1g.10gb": ["MIG-9a8b7c6d-aaaa"]}
    assert devices_by_resource(pods[2].containers[0].devices) == {"amd.com/gpu": ["0000:c1:00.0", "0000:c2:00.0"]}


def test_changes_are_seen_on_the_next_call(fake_kubelet: FakeKubelet, client: Any) -> None:
    gpus = {"nvidia.com/gpu": ["GPU-a"]}
    fake_kubelet.set_pods([Pod("job-1", "ml", [Container("c", gpus)])])
    assert [p.name for p in list_pods(client).pod_resources] == ["job-1"]

    gpus["nvidia.com/gpu"].append("GPU-b")  # the caller's later edits do not leak into what is served
    fake_kubelet.set_pods([Pod("job-2", "ml", [Container("c", {"nvidia.com/gpu": ["GPU-b"]})])])
    pods = list_pods(client).pod_resources
    assert [p.name for p in pods] == ["job-2"]
    assert devices_by_resource(pods[0].containers[0].devices) == {"nvidia.com/gpu": ["GPU-b"]}

    fake_kubelet.set_pods([])
    assert list(list_pods(client).pod_resources) == []


def test_get_answers_for_one_pod(fake_kubelet: FakeKubelet, client: Any) -> None:
    fake_kubelet.set_pods([TRAINER, MIG_POD])

    response = client.Get(pb2.GetPodResourcesRequest(pod_name="notebook", pod_namespace="users"), timeout=TIMEOUT)
    assert (response.pod_resources.name, response.pod_resources.namespace) == ("notebook", "users")
    assert devices_by_resource(response.pod_resources.containers[0].devices) == {
        "nvidia.com/mig-1g.10gb": ["MIG-9a8b7c6d-aaaa"]
    }

    # the same name in another namespace is another pod; the kubelet answers a plain Go error (UNKNOWN)
    error = rpc_error(
        lambda: client.Get(pb2.GetPodResourcesRequest(pod_name="notebook", pod_namespace="ml"), timeout=TIMEOUT)
    )
    assert error.code() == grpc.StatusCode.UNKNOWN
    assert error.details() == "pod notebook in namespace ml not found"
    assert [(r.pod_name, r.pod_namespace) for r in fake_kubelet.calls("Get")] == [
        ("notebook", "users"),
        ("notebook", "ml"),
    ]


def test_get_allocatable_resources(fake_kubelet: FakeKubelet, client: Any) -> None:
    fake_kubelet.set_allocatable(
        {"nvidia.com/gpu": ["GPU-a", "GPU-b"], "nvidia.com/mig-1g.10gb": ["MIG-x"]}, cpu_ids=[0, 1, 2, 3]
    )
    fake_kubelet.set_topology({"GPU-a": 0, "GPU-b": 1, "MIG-x": [0, 1]})

    response = client.GetAllocatableResources(pb2.AllocatableResourcesRequest(), timeout=TIMEOUT)

    entries = [(d.resource_name, list(d.device_ids), [n.ID for n in d.topology.nodes]) for d in response.devices]
    # a device on two NUMA nodes comes twice, once per node, as from the kubelet
    assert entries == [
        ("nvidia.com/gpu", ["GPU-a"], [0]),
        ("nvidia.com/gpu", ["GPU-b"], [1]),
        ("nvidia.com/mig-1g.10gb", ["MIG-x"], [0]),
        ("nvidia.com/mig-1g.10gb", ["MIG-x"], [1]),
    ]
    assert list(response.cpu_ids) == [0, 1, 2, 3]

    # the topology applies to allocated devices as well
    fake_kubelet.set_pods([Pod("p", "ns", [Container("c", {"nvidia.com/gpu": ["GPU-b"]})])])
    (device,) = list_pods(client).pod_resources[0].containers[0].devices
    assert [n.ID for n in device.topology.nodes] == [1]


def test_dra_fields_round_trip(fake_kubelet: FakeKubelet, client: Any) -> None:
    fake_kubelet.set_pods([DRA_POD])

    for pod in (
        list_pods(client).pod_resources[0],
        client.Get(pb2.GetPodResourcesRequest(pod_name="dra-pod", pod_namespace="ml"), timeout=TIMEOUT).pod_resources,
    ):
        (container,) = pod.containers
        assert list(container.devices) == []
        (claim,) = container.dynamic_resources
        assert (claim.claim_name, claim.claim_namespace) == ("gpu-claim", "ml")
        first, second = claim.claim_resources
        assert [c.name for c in first.cdi_devices] == ["k8s.gpu.nvidia.com/device=gpu-0"]
        assert (first.driver_name, first.pool_name, first.device_name) == ("gpu.nvidia.com", "node-a", "gpu-0")
        assert not first.HasField("share_id")
        assert [c.name for c in second.cdi_devices] == [
            "k8s.gpu.nvidia.com/device=gpu-1",
            "k8s.gpu.nvidia.com/device=gpu-1-mps",
        ]
        assert second.HasField("share_id") and second.share_id == "6b2e0f5c-share"


def test_a_pod_resources_message_is_served_as_given(fake_kubelet: FakeKubelet, client: Any) -> None:
    memory = pb2.ContainerMemory(memory_type="hugepages-1Gi", size=2 << 30)
    pod = pb2.PodResources(name="raw", namespace="ns", cpu_ids=[4], memory=[memory])
    fake_kubelet.set_pods([pod])
    pod.name = "changed afterwards"

    (served,) = list_pods(client).pod_resources
    assert served.name == "raw"
    assert list(served.cpu_ids) == [4] and served.memory[0].size == 2 << 30


@pytest.mark.parametrize("method", ["Get", "GetAllocatableResources"])
def test_an_older_kubelet_answers_unimplemented(fake_kubelet: FakeKubelet, client: Any, method: str) -> None:
    request = pb2.GetPodResourcesRequest(pod_name="p", pod_namespace="ns")
    if method == "GetAllocatableResources":
        request = pb2.AllocatableResourcesRequest()
    fake_kubelet.set_pods([Pod("p", "ns")])
    fake_kubelet.disable(method)

    error = rpc_error(lambda: getattr(client, method)(request, timeout=TIMEOUT))
    assert error.code() == grpc.StatusCode.UNIMPLEMENTED
    assert error.details() == f"unknown method {method} for service v1.PodResourcesLister"
    assert len(list_pods(client).pod_resources) == 1  # List still works

    fake_kubelet.enable(method)
    getattr(client, method)(request, timeout=TIMEOUT)


def test_a_feature_gate_off_answers_unknown_with_the_kubelets_message(fake_kubelet: FakeKubelet, client: Any) -> None:
    fake_kubelet.disable("Get", grpc.StatusCode.UNKNOWN)
    fake_kubelet.disable("GetAllocatableResources", grpc.StatusCode.UNKNOWN)

    error = rpc_error(lambda: client.Get(pb2.GetPodResourcesRequest(pod_name="p", pod_namespace="ns"), timeout=TIMEOUT))
    assert (error.code(), error.details()) == (grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled")
    error = rpc_error(lambda: client.GetAllocatableResources(pb2.AllocatableResourcesRequest(), timeout=TIMEOUT))
    assert (error.code(), error.details()) == (
        grpc.StatusCode.UNKNOWN,
        "Pod Resources API GetAllocatableResources disabled",
    )
    with pytest.raises(ValueError, match="not a method"):
        fake_kubelet.disable("Watch")


def test_the_delay_is_honoured(fake_kubelet: FakeKubelet, client: Any) -> None:
    fake_kubelet.set_pods([TRAINER])
    fake_kubelet.set_delay(3.0, "List")

    started = time.monotonic()
    error = rpc_error(lambda: list_pods(client, timeout=0.3))
    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert time.monotonic() - started < 2.0

    # other methods are not delayed
    started = time.monotonic()
    client.Get(pb2.GetPodResourcesRequest(pod_name="trainer-0", pod_namespace="ml"), timeout=TIMEOUT)
    assert time.monotonic() - started < 1.0

    # a client that waits long enough gets its answer, after the delay
    fake_kubelet.set_delay(0.5, "List")
    started = time.monotonic()
    assert len(list_pods(client).pod_resources) == 1
    assert time.monotonic() - started >= 0.5

    fake_kubelet.set_delay(0)
    started = time.monotonic()
    list_pods(client)
    assert time.monotonic() - started < 1.0


def test_stop_removes_the_socket_and_start_brings_it_back(fake_kubelet: FakeKubelet, client: Any) -> None:
    path = fake_kubelet.socket_path
    fake_kubelet.set_pods([TRAINER])
    assert stat.S_ISSOCK(os.stat(path).st_mode)
    assert len(list_pods(client).pod_resources) == 1

    fake_kubelet.stop()
    assert not os.path.exists(path)
    assert not fake_kubelet.running
    error = rpc_error(lambda: list_pods(client))  # the connected channel
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    with grpc.insecure_channel(fake_kubelet.target) as fresh:  # and a new one
        error = rpc_error(lambda: list_pods(pb2_grpc.PodResourcesListerStub(fresh)))
        assert error.code() == grpc.StatusCode.UNAVAILABLE

    fake_kubelet.set_pods([MIG_POD])  # the script survives a restart, as the pods on a node do
    fake_kubelet.start()
    assert fake_kubelet.socket_path == path and stat.S_ISSOCK(os.stat(path).st_mode)
    # A channel of its own connects at once. The old channel's connection is in reconnect backoff (about 1 s
    # at first, growing to 120 s by default) and so is a new channel with the same options: gRPC shares
    # connections between channels in a process. The old one comes back to a call that waits for it.
    with grpc.insecure_channel(fake_kubelet.target, options=[("grpc.use_local_subchannel_pool", 1)]) as fresh:
        assert [p.name for p in list_pods(pb2_grpc.PodResourcesListerStub(fresh)).pod_resources] == ["notebook"]
    started = time.monotonic()
    assert [p.name for p in list_pods(client, wait_for_ready=True).pod_resources] == ["notebook"]
    assert time.monotonic() - started < TIMEOUT


def test_a_call_in_flight_when_the_kubelet_stops_fails_unavailable(fake_kubelet: FakeKubelet, client: Any) -> None:
    fake_kubelet.set_delay(10.0)
    future = client.List.future(pb2.ListPodResourcesRequest(), timeout=TIMEOUT)
    deadline = time.monotonic() + TIMEOUT
    while not fake_kubelet.calls("List") and time.monotonic() < deadline:
        time.sleep(0.01)

    started = time.monotonic()
    fake_kubelet.stop()
    assert time.monotonic() - started < 2.0  # the delayed handler does not hold the stop up
    assert future.exception(timeout=TIMEOUT).code() == grpc.StatusCode.UNAVAILABLE


def test_the_kubelets_rate_limit(kubelet_socket: str) -> None:
    assert FakeKubelet(kubelet_socket)._rate_limit == KUBELET_RATE_LIMIT == (100.0, 10)
    # a slow bucket (1 call a second, bursts of 3) so that the count does not depend on the machine's speed
    with (
        FakeKubelet(kubelet_socket, rate_limit=(1.0, 3)) as kubelet,
        grpc.insecure_channel(kubelet.target) as channel,
    ):
        client = pb2_grpc.PodResourcesListerStub(channel)
        codes = []
        for _ in range(5):
            try:
                list_pods(client)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as error:
                codes.append(error.code())
                assert error.details() == "rejected by rate limit"
        assert codes[:3] == [grpc.StatusCode.OK] * 3
        assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes[3:]


def test_state_changes_while_serving_are_atomic(kubelet_socket: str) -> None:
    """Each answer is one whole script: never half of one pod list and half of the next."""
    scripts = [
        [
            Pod(f"pod-{version}-{i}", "ns", [Container("c", {"nvidia.com/gpu": [f"GPU-{version}-{i}"]})])
            for i in range(20)
        ]
        for version in range(2)
    ]
    seen: list[set[str]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader(client: Any) -> None:
        try:
            while not stop.is_set():
                pods = list_pods(client).pod_resources
                seen.append({p.name.split("-")[1] for p in pods})
        except BaseException as exc:
            errors.append(exc)

    with FakeKubelet(kubelet_socket, rate_limit=None) as kubelet, grpc.insecure_channel(kubelet.target) as channel:
        kubelet.set_pods(scripts[0])
        client = pb2_grpc.PodResourcesListerStub(channel)
        readers = [threading.Thread(target=reader, args=(client,)) for _ in range(3)]
        for thread in readers:
            thread.start()
        end = time.monotonic() + 0.5
        flips = 0
        while time.monotonic() < end:
            kubelet.set_pods(scripts[flips % 2])
            flips += 1
        stop.set()
        for thread in readers:
            thread.join(TIMEOUT)

    assert not errors
    assert seen and all(versions in ({"0"}, {"1"}) for versions in seen)


def test_socket_paths_must_fit_in_sun_path() -> None:
    with pytest.raises(ValueError, match="longer than 107 bytes"):
        FakeKubelet("/tmp/" + "k" * 120 + "/kubelet.sock")


def test_the_fixture_path_is_short(kubelet_socket: str) -> None:
    assert kubelet_socket.startswith("/tmp/k") and kubelet_socket.endswith("/pod-resources/kubelet.sock")
    assert len(kubelet_socket.encode()) < 108
