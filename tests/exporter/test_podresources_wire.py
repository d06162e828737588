"""The hand-written pod-resources v1 codec, checked against the real generated protobuf classes as reference.

Messages are built and serialized with protoc's Python stubs (tests/k8s/protos.py); the decoder must read
them exactly as protobuf itself parses them, skip what it does not use, and reject malformed bytes with
WireError and nothing else.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
import pytest
from google.protobuf.message import DecodeError

from gpuscope.exporter.jobs.podresources_wire import (
    GET,
    GET_ALLOCATABLE,
    LIST,
    Claim,
    ClaimDevice,
    Container,
    PodResources,
    WireError,
    decode_allocatable,
    decode_get,
    decode_list,
    encode_empty,
    encode_get_request,
    encode_list,
)
from tests.k8s import fake_kubelet as fk
from tests.k8s.protos import SERVICE, load

pb2 = load().pb2
TIMEOUT = 5.0  # seconds: every gRPC call has a deadline


# ---- building messages by hand --------------------------------------------------------------------------


def varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def ld(number: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return tag(number, 2) + varint(len(payload)) + payload


# one unknown field (number 99) of each valid wire type
UNKNOWN = {
    "varint": tag(99, 0) + varint(2**63 + 5),
    "fixed64": tag(99, 1) + b"\x01" * 8,
    "length-delimited": ld(99, b"\xff\xfe not even UTF-8 \x00"),
    "fixed32": tag(99, 5) + b"\x02" * 4,
}
ALL_UNKNOWN = b"".join(UNKNOWN.values())


# ---- the reference: pb2 messages to the codec's dataclasses -----------------------------------------------


def pod_of(m: Any) -> PodResources:
    return PodResources(m.name, m.namespace, tuple(container_of(c) for c in m.containers))


def container_of(m: Any) -> Container:
    devices = tuple((d.resource_name, tuple(d.device_ids)) for d in m.devices)
    claims = tuple(
        Claim(
            r.claim_name,
            r.claim_namespace,
            tuple(
                ClaimDevice(x.driver_name, x.pool_name, x.device_name, tuple(cdi.name for cdi in x.cdi_devices))
                for x in r.claim_resources
            ),
        )
        for r in m.dynamic_resources
    )
    return Container(m.name, devices, claims)


def topology(*nodes: int) -> Any:
    return pb2.TopologyInfo(nodes=[pb2.NUMANode(ID=n) for n in nodes])


def memory() -> list[Any]:
    return [
        pb2.ContainerMemory(memory_type="memory", size=2**34, topology=topology(0)),
        pb2.ContainerMemory(memory_type="hugepages-1Gi", size=2**31, topology=topology(0, 1)),
    ]


def gpu(resource: str, device_id: str, *numa: int) -> Any:
    return pb2.ContainerDevices(resource_name=resource, device_ids=[device_id], topology=topology(*numa))


def rich_pods() -> list[Any]:
    """Pods with everything the kubelet can send: the decoder reads some of it and skips the rest."""
    dra = pb2.DynamicResource(
        claim_name="gpu-claim",
        claim_namespace="ml",
        claim_resources=[
            pb2.ClaimResource(
                cdi_devices=[pb2.CDIDevice(name="k8s.gpu.nvidia.com/device=gpu-0")],
                driver_name="gpu.nvidia.com",
                pool_name="node-a",
                device_name="gpu-0",
            ),
            pb2.ClaimResource(
                cdi_devices=[
                    pb2.CDIDevice(name="k8s.gpu.nvidia.com/device=gpu-1"),
                    pb2.CDIDevice(name="k8s.gpu.nvidia.com/device=gpu-1-mps"),
                ],
                driver_name="gpu.nvidia.com",
                pool_name="node-a",
                device_name="gpu-1",
                share_id="6b2e0f5c-share",
            ),
        ],
    )
    return [
        pb2.PodResources(
            name="trainer-0",
            namespace="ml",
            cpu_ids=[2, 3, 40, 41],
            memory=memory(),
            containers=[
                pb2.ContainerResources(
                    name="main",
                    devices=[
                        gpu("nvidia.com/gpu", "GPU-6f1c2d3e", 0),
                        gpu("nvidia.com/gpu", "GPU-b2", 1),
                        gpu("nvidia.com/gpu", "GPU-b2", 0),  # a device on two NUMA nodes: two entries
                        pb2.ContainerDevices(resource_name="rdma/hca", device_ids=["mlx5_0"]),
                    ],
                    cpu_ids=[2, 3, 2**40],
                    memory=memory(),
                    dynamic_resources=[dra],
                ),
                pb2.ContainerResources(name="sidecar", cpu_ids=[7]),
            ],
        ),
        pb2.PodResources(name="notebook-ü", namespace="users"),
        pb2.PodResources(),  # everything at its default: nothing at all on the wire
    ]


RICH_EXPECTED = (
    PodResources(
        "trainer-0",
        "ml",
        (
            Container(
                "main",
                (
                    ("nvidia.com/gpu", ("GPU-6f1c2d3e",)),
                    ("nvidia.com/gpu", ("GPU-b2",)),
                    ("nvidia.com/gpu", ("GPU-b2",)),
                    ("rdma/hca", ("mlx5_0",)),
                ),
                (
                    Claim(
                        "gpu-claim",
                        "ml",
                        (
                            ClaimDevice("gpu.nvidia.com", "node-a", "gpu-0", ("k8s.gpu.nvidia.com/device=gpu-0",)),
                            ClaimDevice(
                                "gpu.nvidia.com",
                                "node-a",
                                "gpu-1",
                                ("k8s.gpu.nvidia.com/device=gpu-1", "k8s.gpu.nvidia.com/device=gpu-1-mps"),
                            ),
                        ),
                    ),
                ),
            ),
            Container("sidecar", (), ()),
        ),
    ),
    PodResources("notebook-ü", "users", ()),
    PodResources("", "", ()),
)


def rich_list_bytes() -> bytes:
    return pb2.ListPodResourcesResponse(pod_resources=rich_pods()).SerializeToString()


def allocatable_bytes() -> bytes:
    return pb2.AllocatableResourcesResponse(
        devices=[
            gpu("nvidia.com/gpu", "GPU-a", 0),
            gpu("nvidia.com/gpu", "GPU-b", 1),
            gpu("amd.com/gpu", "0000:c1:00.0"),
        ],
        cpu_ids=list(range(64)),
        memory=memory(),
    ).SerializeToString()


def get_bytes() -> bytes:
    return pb2.GetPodResourcesResponse(pod_resources=rich_pods()[0]).SerializeToString()


# ---- well-formed answers --------------------------------------------------------------------------------


def test_the_method_paths_are_the_services() -> None:
    assert tuple(f"/{SERVICE}/{m}" for m in fk.METHODS) == (LIST, GET_ALLOCATABLE, GET)


def test_empty_answers() -> None:
    assert decode_list(b"") == ()
    assert decode_list(pb2.ListPodResourcesResponse().SerializeToString()) == ()
    assert decode_get(b"") is None
    assert decode_allocatable(b"") == ()
    assert encode_empty() == encode_empty(object()) == b""


def test_list_reads_pods_containers_devices_and_claims_and_skips_the_rest() -> None:
    pods = decode_list(rich_list_bytes())
    assert pods == RICH_EXPECTED
    assert pods == tuple(pod_of(m) for m in rich_pods())  # the reference conversion agrees


def test_one_device_entry_per_device_id_keeps_every_entry_in_order() -> None:
    ids = [f"GPU-{i}" for i in range(8)]
    container = pb2.ContainerResources(
        name="c", devices=[pb2.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=[i]) for i in ids]
    )
    data = pb2.ListPodResourcesResponse(
        pod_resources=[pb2.PodResources(name="p", namespace="n", containers=[container])]
    ).SerializeToString()
    (pod,) = decode_list(data)
    assert pod.containers[0].devices == tuple(("nvidia.com/gpu", (i,)) for i in ids)


def test_several_ids_in_one_entry() -> None:
    data = pb2.AllocatableResourcesResponse(
        devices=[pb2.ContainerDevices(resource_name="amd.com/gpu", device_ids=["0000:c1:00.0", "0000:c2:00.0"])]
    ).SerializeToString()
    assert decode_allocatable(data) == (("amd.com/gpu", ("0000:c1:00.0", "0000:c2:00.0")),)


def test_get_with_and_without_a_pod() -> None:
    assert decode_get(get_bytes()) == RICH_EXPECTED[0]
    assert decode_get(pb2.GetPodResourcesResponse().SerializeToString()) is None
    # a pod whose fields are all defaults is still a pod: the field is there, empty
    empty_pod = pb2.GetPodResourcesResponse(pod_resources=pb2.PodResources()).SerializeToString()
    assert empty_pod == b"\x0a\x00"
    assert decode_get(empty_pod) == PodResources("", "", ())


def test_allocatable_skips_cpu_ids_memory_and_topology() -> None:
    assert decode_allocatable(allocatable_bytes()) == (
        ("nvidia.com/gpu", ("GPU-a",)),
        ("nvidia.com/gpu", ("GPU-b",)),
        ("amd.com/gpu", ("0000:c1:00.0",)),
    )


def test_get_request_round_trips_through_protobuf() -> None:
    for name, namespace in [("trainer-0", "ml"), ("", ""), ("ü-pod", ""), ("x" * 300, "kube-system")]:
        request = pb2.GetPodResourcesRequest.FromString(encode_get_request((name, namespace)))
        assert (request.pod_name, request.pod_namespace) == (name, namespace)
        # byte for byte what protobuf writes (proto3 leaves out empty strings)
        expected = pb2.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace).SerializeToString()
        assert encode_get_request((name, namespace)) == expected


def test_a_singular_field_sent_twice_is_the_last_one() -> None:
    data = ld(1, ld(1, b"first") + ld(2, b"ns") + ld(1, b"second"))
    assert pb2.ListPodResourcesResponse.FromString(data).pod_resources[0].name == "second"
    assert decode_list(data) == (PodResources("second", "ns", ()),)


def test_a_singular_message_sent_twice_is_merged_as_protobuf_does() -> None:
    first = pb2.GetPodResourcesResponse(
        pod_resources=pb2.PodResources(name="a", namespace="n", containers=[pb2.ContainerResources(name="c1")])
    ).SerializeToString()
    second = pb2.GetPodResourcesResponse(
        pod_resources=pb2.PodResources(name="b", containers=[pb2.ContainerResources(name="c2")])
    ).SerializeToString()
    reference = pb2.GetPodResourcesResponse.FromString(first + second).pod_resources
    assert (
        decode_get(first + second)
        == pod_of(reference)
        == PodResources("b", "n", (Container("c1", (), ()), Container("c2", (), ())))
    )


def test_a_known_field_with_another_wire_type_is_skipped_like_protobuf() -> None:
    # PodResources.name (1) as a varint, .containers (3) as a fixed32: protobuf keeps them as unknown fields
    pod = tag(1, 0) + varint(5) + ld(2, b"ns") + tag(3, 5) + b"abcd"
    data = ld(1, pod)
    assert decode_list(data) == tuple(pod_of(m) for m in pb2.ListPodResourcesResponse.FromString(data).pod_resources)
    assert decode_list(data) == (PodResources("", "ns", ()),)


@pytest.mark.parametrize("kind", [*UNKNOWN, "all"])
def test_unknown_fields_are_skipped_at_every_level(kind: str) -> None:
    extra = ALL_UNKNOWN if kind == "all" else UNKNOWN[kind]

    def message(type_name: str, /, **fields: Any) -> bytes:
        return getattr(pb2, type_name)(**fields).SerializeToString() + extra  # unknown fields after the known

    cdi = ld(1, message("CDIDevice", name="vendor.com/gpu=0"))
    claim_resource = message("ClaimResource", driver_name="d", pool_name="p", device_name="gpu-0") + cdi
    dynamic = message("DynamicResource", claim_name="claim", claim_namespace="ns") + ld(4, claim_resource)
    devices = message("ContainerDevices", resource_name="nvidia.com/gpu", device_ids=["GPU-1"], topology=topology(0))
    container = extra + ld(1, b"main") + extra + ld(2, devices) + ld(5, dynamic) + extra  # before, between, after
    pod = message("PodResources", name="p", namespace="ns", cpu_ids=[1]) + ld(3, container)
    expected_pod = PodResources(
        "p",
        "ns",
        (
            Container(
                "main",
                (("nvidia.com/gpu", ("GPU-1",)),),
                (Claim("claim", "ns", (ClaimDevice("d", "p", "gpu-0", ("vendor.com/gpu=0",)),)),),
            ),
        ),
    )

    list_data = extra + ld(1, pod) + extra
    reference = pb2.ListPodResourcesResponse.FromString(list_data)
    assert decode_list(list_data) == tuple(pod_of(m) for m in reference.pod_resources) == (expected_pod,)

    get_data = ld(1, pod) + extra
    assert decode_get(get_data) == pod_of(pb2.GetPodResourcesResponse.FromString(get_data).pod_resources)
    assert decode_get(extra) is None

    allocatable_data = extra + ld(1, devices)
    pb2.AllocatableResourcesResponse.FromString(allocatable_data)  # valid for protobuf too
    assert decode_allocatable(allocatable_data) == (("nvidia.com/gpu", ("GPU-1",)),)


def test_large_field_numbers_and_long_varints_are_fine() -> None:
    biggest = (1 << 29) - 1
    data = tag(biggest, 0) + b"\xff" * 9 + b"\x01" + ld(1, ld(1, b"p"))  # a ten-byte varint value
    pb2.ListPodResourcesResponse.FromString(data)
    assert decode_list(data) == (PodResources("p", "", ()),)
    # a length written with more bytes than it needs is still a length
    padded = tag(1, 2) + b"\x83\x80\x80\x00" + ld(1, b"p")
    assert pb2.ListPodResourcesResponse.FromString(padded).pod_resources[0].name == "p"
    assert decode_list(padded) == (PodResources("p", "", ()),)


# ---- malformed answers ----------------------------------------------------------------------------------

DECODERS: list[tuple[Callable[[bytes], object], Any, Callable[[], bytes]]] = [
    # (ours, protobuf's message class, a valid answer for both)
    (decode_list, pb2.ListPodResourcesResponse, rich_list_bytes),
    (decode_get, pb2.GetPodResourcesResponse, get_bytes),
    (decode_allocatable, pb2.AllocatableResourcesResponse, allocatable_bytes),
]


def reference_accepts(message_class: Any, data: bytes) -> bool:
    try:
        message_class.FromString(data)
    except DecodeError:
        return False
    return True


def outcome(decode: Callable[[bytes], object], data: bytes) -> object:
    """What the decoder returns, or WireError; any other exception fails the test with its traceback."""
    try:
        return decode(data)
    except WireError as exc:
        assert "offset" in str(exc), exc
        return WireError


def as_reference(decode: Callable[[bytes], object], message_class: Any, data: bytes) -> object:
    m = message_class.FromString(data)
    if decode is decode_list:
        return tuple(pod_of(p) for p in m.pod_resources)
    if decode is decode_get:
        return pod_of(m.pod_resources) if m.HasField("pod_resources") else None
    return tuple((d.resource_name, tuple(d.device_ids)) for d in m.devices)


@pytest.mark.parametrize(("decode", "message_class", "valid"), DECODERS, ids=["list", "get", "allocatable"])
def test_every_truncation_is_rejected_exactly_when_protobuf_rejects_it(
    decode: Callable[[bytes], object], message_class: Any, valid: Callable[[], bytes]
) -> None:
    data = valid()
    rejected = 0
    for cut in range(len(data)):
        short = data[:cut]
        got = outcome(decode, short)
        if reference_accepts(message_class, short):  # cut between two top-level fields
            assert got == as_reference(decode, message_class, short), cut
        else:
            assert got is WireError, cut
            rejected += 1
    assert rejected > len(data) // 2


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (b"\x0b", "invalid wire type 3"),  # start group
        (b"\x0c", "invalid wire type 4"),  # end group
        (b"\x0e\x00", "invalid wire type 6"),
        (b"\x0f\x00", "invalid wire type 7"),
        (ld(1, ld(3, b"\x1b")), "invalid wire type 3"),  # deep inside: a container's field 3 as a group
        (b"\x02\x00", "field number 0"),
        (b"\x80\x00", "field number 0"),  # tag 0 written in two bytes
        (tag(1, 0) + b"\xff" * 10 + b"\x01", "longer than 10 bytes"),
        (b"\xff" * 11, "longer than 10 bytes"),
        (tag(1, 2) + b"\x80" * 10 + b"\x00", "longer than 10 bytes"),
        (b"\x08", "truncated varint at offset 1"),
        (b"\x08\x80", "truncated varint at offset 1"),
        (b"\x0a\x85", "truncated varint at offset 1"),
        (b"\x80", "truncated varint at offset 0"),
        (tag(1, 1) + b"\x00" * 7, "truncated fixed-size"),
        (tag(1, 5) + b"\x00" * 3, "truncated fixed-size"),
        (b"\x0a\x05abcd", "5 bytes, only 4 left"),
        (tag(1, 2) + b"\xff\xff\xff\xff\x0f", "only 0 left"),
        (ld(1, b"\x0a\x03ab") + b"\x00", "3 bytes, only 2 left"),  # runs past its message, not the buffer
        (ld(1, ld(1, b"\xff")), "invalid UTF-8 in a string at offset 4"),
        (ld(1, ld(2, b"ok\xc3")), "invalid UTF-8"),  # cut in the middle of a character
        (ld(1, ld(1, b"\xed\xa0\x80")), "invalid UTF-8"),  # a UTF-16 surrogate
        (ld(1, ld(1, b"\xc0\xaf")), "invalid UTF-8"),  # an overlong "/"
        (ld(1, ld(3, ld(2, ld(2, b"GPU-\x80")))), "invalid UTF-8"),  # a device id
        (ld(1, ld(3, ld(5, ld(4, ld(1, ld(1, b"\xfe")))))), "invalid UTF-8"),  # a CDI device name
    ],
)
def test_malformed_bytes_raise_wire_error(data: bytes, what: str) -> None:
    with pytest.raises(WireError, match=what):
        decode_list(data)
    with pytest.raises(WireError):
        decode_get(data)
    assert issubclass(WireError, ValueError)


def test_invalid_utf8_in_fields_that_are_skipped_does_not_matter() -> None:
    # protobuf would reject ContainerMemory.memory_type "\xff"; nothing here reads it
    data = ld(1, ld(1, b"p") + ld(5, ld(1, b"\xff")))
    assert decode_list(data) == (PodResources("p", "", ()),)


@pytest.mark.parametrize(("decode", "message_class", "valid"), DECODERS, ids=["list", "get", "allocatable"])
def test_random_corruptions_give_an_answer_or_wire_error(
    decode: Callable[[bytes], object], message_class: Any, valid: Callable[[], bytes]
) -> None:
    rng = random.Random(20260723)
    data = valid()
    for case in range(300):
        corrupt = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            where = rng.randrange(len(corrupt))
            action = rng.choice(("flip", "byte", "insert", "delete"))
            if action == "flip":
                corrupt[where] ^= 1 << rng.randrange(8)
            elif action == "byte":
                corrupt[where] = rng.choice((0x00, 0x7F, 0x80, 0xFF, rng.randrange(256)))
            elif action == "insert":
                corrupt[where:where] = rng.randbytes(rng.randint(1, 4))
            else:
                del corrupt[where : where + rng.randint(1, 4)]
        got = outcome(decode, bytes(corrupt))
        # where both accept the bytes, they read the same (protobuf also rejects bad bytes we skip, and we
        # reject groups it skips, so one accepting alone proves nothing)
        if got is not WireError and reference_accepts(message_class, bytes(corrupt)):
            assert got == as_reference(decode, message_class, bytes(corrupt)), (case, bytes(corrupt))


# ---- over real gRPC -------------------------------------------------------------------------------------


def test_list_get_and_allocatable_from_the_fake_kubelet() -> None:
    scripted = [
        fk.Pod(
            "trainer-0",
            "ml",
            [
                fk.Container("main", {"nvidia.com/gpu": ["GPU-1", "GPU-2"], "rdma/hca": ["mlx5_0"]}, cpu_ids=[2, 3]),
                fk.Container(
                    "dra",
                    claims=[
                        fk.Claim(
                            "gpu-claim",
                            "ml",
                            [
                                fk.ClaimDevice(
                                    ["vendor.com/gpu=gpu-3"], driver="gpu.nvidia.com", pool="a", device="gpu-3"
                                ),
                                fk.ClaimDevice(
                                    ["vendor.com/gpu=gpu-4", "vendor.com/gpu=gpu-4-mps"],
                                    driver="gpu.nvidia.com",
                                    pool="a",
                                    device="gpu-4",
                                    share_id="share-1",
                                ),
                            ],
                        )
                    ],
                ),
            ],
        ),
        fk.Pod("idle", "default"),
    ]
    with fk.short_socket_path() as path, fk.FakeKubelet(path) as kubelet:
        kubelet.set_pods(scripted)
        kubelet.set_topology({"GPU-2": [0, 1]})  # the kubelet then sends GPU-2 once per NUMA node
        kubelet.set_allocatable({"nvidia.com/gpu": ["GPU-1", "GPU-2"]}, cpu_ids=range(8))
        with grpc.insecure_channel(kubelet.target) as channel:
            call_list = channel.unary_unary(LIST, request_serializer=encode_empty, response_deserializer=decode_list)
            pods = call_list(None, timeout=TIMEOUT)
            call_get = channel.unary_unary(GET, request_serializer=encode_get_request, response_deserializer=decode_get)
            pod = call_get(("trainer-0", "ml"), timeout=TIMEOUT)
            with pytest.raises(grpc.RpcError) as missing:
                call_get(("nobody", "ml"), timeout=TIMEOUT)
            call_allocatable = channel.unary_unary(
                GET_ALLOCATABLE, request_serializer=encode_empty, response_deserializer=decode_allocatable
            )
            allocatable = call_allocatable(None, timeout=TIMEOUT)
        get_requests = kubelet.calls("Get")

    gpu_devices = (("nvidia.com/gpu", ("GPU-1",)), ("nvidia.com/gpu", ("GPU-2",)), ("nvidia.com/gpu", ("GPU-2",)))
    main = Container("main", (*gpu_devices, ("rdma/hca", ("mlx5_0",))), ())
    claim = Claim(
        "gpu-claim",
        "ml",
        (
            ClaimDevice("gpu.nvidia.com", "a", "gpu-3", ("vendor.com/gpu=gpu-3",)),
            ClaimDevice("gpu.nvidia.com", "a", "gpu-4", ("vendor.com/gpu=gpu-4", "vendor.com/gpu=gpu-4-mps")),
        ),
    )
    trainer = PodResources("trainer-0", "ml", (main, Container("dra", (), (claim,))))
    assert pods == (trainer, PodResources("idle", "default", ()))
    assert pod == trainer
    # the kubelet answers an unknown pod with an error, not with an empty GetPodResourcesResponse
    assert missing.value.code() == grpc.StatusCode.UNKNOWN
    assert [(r.pod_name, r.pod_namespace) for r in get_requests] == [("trainer-0", "ml"), ("nobody", "ml")]
    assert allocatable == gpu_devices


def test_a_malformed_answer_over_grpc_is_an_internal_rpc_error_not_a_wire_error() -> None:
    """grpcio catches the deserializer's WireError (and logs it): the caller sees StatusCode.INTERNAL."""

    def broken_list(request: bytes, context: grpc.ServicerContext) -> bytes:
        return b"\x0a\x05abc"  # a pod 5 bytes long with 3 bytes left

    handler = grpc.method_handlers_generic_handler(SERVICE, {"List": grpc.unary_unary_rpc_method_handler(broken_list)})
    with fk.short_socket_path() as path, futures.ThreadPoolExecutor(2) as executor:
        os.makedirs(os.path.dirname(path))
        server = grpc.server(executor, handlers=[handler])
        server.add_insecure_port(f"unix:{path}")
        server.start()
        try:
            with grpc.insecure_channel(f"unix:{path}") as channel:
                call = channel.unary_unary(LIST, request_serializer=encode_empty, response_deserializer=decode_list)
                with pytest.raises(grpc.RpcError) as failed:
                    call(None, timeout=TIMEOUT)
        finally:
            server.stop(None).wait(TIMEOUT)
    assert failed.value.code() == grpc.StatusCode.INTERNAL
    assert "deserializ" in (failed.value.details() or "")


def test_encode_list_is_read_back_by_protobuf_and_by_us() -> None:
    pods = (
        PodResources("train-0", "ml", (Container("main", (("nvidia.com/gpu", ("GPU-1", "GPU-2")),), ()),)),
        PodResources("idle", "kube-system", (Container("c", (), ()),)),
    )
    data = encode_list(pods)
    parsed = pb2.ListPodResourcesResponse.FromString(data)
    assert [(p.name, p.namespace) for p in parsed.pod_resources] == [("train-0", "ml"), ("idle", "kube-system")]
    assert list(parsed.pod_resources[0].containers[0].devices[0].device_ids) == ["GPU-1", "GPU-2"]
    assert decode_list(data) == pods
