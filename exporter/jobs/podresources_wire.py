"""The kubelet's pod-resources v1 messages (tests/k8s/podresources/v1/api.proto), encoded and decoded by hand.

The exporter calls the kubelet with grpcio's generic calls, `channel.unary_unary(LIST,
request_serializer=encode_empty)`, and decodes the bytes that answers with decode_list, so that a GPU node
needs neither the protobuf runtime nor generated code. Only what job attribution uses is decoded: pods,
containers, device-plugin devices and DRA claims. Everything else (cpu_ids, memory, topology, share_id,
fields a newer kubelet adds) is skipped, as protobuf skips fields it does not know.

Decode outside the call, not as its response_deserializer: grpcio catches a deserializer's exception
itself, logs a traceback and fails the call with INTERNAL "Exception deserializing response!", so a
WireError would reach the caller as grpc.RpcError, with a traceback in the log each time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

LIST = "/v1.PodResourcesLister/List"
GET_ALLOCATABLE = "/v1.PodResourcesLister/GetAllocatableResources"
GET = "/v1.PodResourcesLister/Get"

# wire types; 3 and 4 (groups) are proto2-only and 6, 7 were never assigned
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_MAX_FIELD = (1 << 29) - 1
_MAX_VARINT_BYTES = 10  # 64 bits at 7 a byte

Span = tuple[int, int]  # [start, end) of a field's payload in the whole response


class WireError(ValueError):
    """Bytes that are not an encoding of the expected message."""


@dataclass(frozen=True)
class ClaimDevice:
    """ClaimResource: one device of a DRA claim, and the CDI device names it maps to."""

    driver: str
    pool: str
    device: str
    cdi_devices: tuple[str, ...]


@dataclass(frozen=True)
class Claim:
    """DynamicResource: a DRA resource claim prepared for a container."""

    name: str
    namespace: str
    devices: tuple[ClaimDevice, ...]


@dataclass(frozen=True)
class Container:
    """ContainerResources. `devices` keeps the kubelet's entries as sent: it sends one per device id (and one
    per NUMA node of a device on several), so a resource name repeats and a device id may too."""

    name: str
    devices: tuple[tuple[str, tuple[str, ...]], ...]
    claims: tuple[Claim, ...]


@dataclass(frozen=True)
class PodResources:
    name: str
    namespace: str
    containers: tuple[Container, ...]


# ---- encoding -------------------------------------------------------------------------------------------


def encode_empty(_: object = None) -> bytes:
    """ListPodResourcesRequest and AllocatableResourcesRequest: messages without fields."""
    return b""


def encode_get_request(pod: tuple[str, str]) -> bytes:
    """GetPodResourcesRequest for (name, namespace)."""
    name, namespace = pod
    return _string_field(1, name) + _string_field(2, namespace)


def encode_list(pods: Iterable[PodResources]) -> bytes:
    """ListPodResourcesResponse for `pods` (devices only: what a kubelet stand-in serves, as in the bench)."""
    return b"".join(_message_field(1, _encode_pod(pod)) for pod in pods)


def _encode_pod(pod: PodResources) -> bytes:
    containers = b"".join(_message_field(3, _encode_container(c)) for c in pod.containers)
    return _string_field(1, pod.name) + _string_field(2, pod.namespace) + containers


def _encode_container(container: Container) -> bytes:
    devices = b"".join(
        _message_field(2, _string_field(1, resource) + b"".join(_string_field(2, i) for i in ids))
        for resource, ids in container.devices
    )
    return _string_field(1, container.name) + devices


def _message_field(number: int, body: bytes) -> bytes:
    return _varint_bytes(number << 3 | _LEN) + _varint_bytes(len(body)) + body


def _string_field(number: int, value: str) -> bytes:
    if not value:
        return b""  # proto3 leaves out fields at their default
    raw = value.encode()
    return _varint_bytes(number << 3 | _LEN) + _varint_bytes(len(raw)) + raw


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# ---- decoding -------------------------------------------------------------------------------------------


def decode_list(data: bytes) -> tuple[PodResources, ...]:
    """ListPodResourcesResponse: every pod on the node."""
    return tuple(_pod(data, [(start, end)]) for number, start, end in _fields(data, 0, len(data)) if number == 1)


def decode_get(data: bytes) -> PodResources | None:
    """GetPodResourcesResponse: the pod, or None when the answer has none."""
    # A singular message field sent several times is merged, as protobuf does: decode all parts as one.
    parts = [(start, end) for number, start, end in _fields(data, 0, len(data)) if number == 1]
    return _pod(data, parts) if parts else None


def decode_allocatable(data: bytes) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """AllocatableResourcesResponse.devices: (resource name, device ids) per entry, as sent."""
    return tuple(_devices(data, start, end) for number, start, end in _fields(data, 0, len(data)) if number == 1)


def _pod(data: bytes, parts: Iterable[Span]) -> PodResources:
    name = namespace = ""
    containers: list[Container] = []
    for part_start, part_end in parts:
        for number, start, end in _fields(data, part_start, part_end):
            if number == 1:
                name = _string(data, start, end)
            elif number == 2:
                namespace = _string(data, start, end)
            elif number == 3:
                containers.append(_container(data, start, end))
    return PodResources(name, namespace, tuple(containers))


def _container(data: bytes, start: int, end: int) -> Container:
    name = ""
    devices: list[tuple[str, tuple[str, ...]]] = []
    claims: list[Claim] = []
    for number, field_start, field_end in _fields(data, start, end):
        if number == 1:
            name = _string(data, field_start, field_end)
        elif number == 2:
            devices.append(_devices(data, field_start, field_end))
        elif number == 5:
            claims.append(_claim(data, field_start, field_end))
    return Container(name, tuple(devices), tuple(claims))


def _devices(data: bytes, start: int, end: int) -> tuple[str, tuple[str, ...]]:
    """ContainerDevices: resource name and device ids (topology skipped)."""
    resource = ""
    ids: list[str] = []
    for number, field_start, field_end in _fields(data, start, end):
        if number == 1:
            resource = _string(data, field_start, field_end)
        elif number == 2:
            ids.append(_string(data, field_start, field_end))
    return resource, tuple(ids)


def _claim(data: bytes, start: int, end: int) -> Claim:
    """DynamicResource (field 1, class_name, is a tombstone)."""
    name = namespace = ""
    devices: list[ClaimDevice] = []
    for number, field_start, field_end in _fields(data, start, end):
        if number == 2:
            name = _string(data, field_start, field_end)
        elif number == 3:
            namespace = _string(data, field_start, field_end)
        elif number == 4:
            devices.append(_claim_device(data, field_start, field_end))
    return Claim(name, namespace, tuple(devices))


def _claim_device(data: bytes, start: int, end: int) -> ClaimDevice:
    """ClaimResource (share_id skipped)."""
    strings = ["", "", ""]  # driver_name (2), pool_name (3), device_name (4)
    cdi: list[str] = []
    for number, field_start, field_end in _fields(data, start, end):
        if number == 1:
            cdi_name = ""
            for cdi_number, cdi_start, cdi_end in _fields(data, field_start, field_end):  # CDIDevice
                if cdi_number == 1:
                    cdi_name = _string(data, cdi_start, cdi_end)
            cdi.append(cdi_name)
        elif 2 <= number <= 4:
            strings[number - 2] = _string(data, field_start, field_end)
    driver, pool, device = strings
    return ClaimDevice(driver, pool, device, tuple(cdi))


def _fields(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(field number, payload start, payload end) of each length-delimited field in data[start:end].

    Every field we decode is a string or a message, so fields of the other wire types are checked and
    skipped: protobuf too treats a known field sent with an unexpected wire type as an unknown field.
    """
    pos = start
    while pos < end:
        tag_at = pos
        tag, pos = _varint(data, pos, end)
        number, wire_type = tag >> 3, tag & 7
        if not 0 < number <= _MAX_FIELD:
            raise WireError(f"field number {number} out of range at offset {tag_at}")
        if wire_type == _LEN:
            length, payload = _varint(data, pos, end)
            pos = payload + length
            if pos > end:
                raise WireError(f"field {number} at offset {tag_at}: {length} bytes, only {end - payload} left")
            yield number, payload, pos
        elif wire_type == _VARINT:
            _, pos = _varint(data, pos, end)
        elif wire_type in (_I64, _I32):
            pos += 8 if wire_type == _I64 else 4
            if pos > end:
                raise WireError(f"field {number} at offset {tag_at}: truncated fixed-size value")
        else:
            raise WireError(f"invalid wire type {wire_type} (field {number}) at offset {tag_at}")


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """The varint at data[pos] and the offset after it; tags and lengths are mostly one byte."""
    if pos < end and data[pos] < 0x80:
        return data[pos], pos + 1
    result = 0
    for i in range(_MAX_VARINT_BYTES):
        if pos + i >= end:
            raise WireError(f"truncated varint at offset {pos}")
        byte = data[pos + i]
        result |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return result, pos + i + 1
    raise WireError(f"varint longer than {_MAX_VARINT_BYTES} bytes at offset {pos}")


def _string(data: bytes, start: int, end: int) -> str:
    try:
        return data[start:end].decode()
    except UnicodeDecodeError as exc:
        raise WireError(f"invalid UTF-8 in a string at offset {start + exc.start}") from None
