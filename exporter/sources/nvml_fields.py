"""Decoding nvmlDeviceGetFieldValues results with one struct unpack.

pynvml's structures decode every attribute access in Python (~2 µs each); an 8-GPU node asks for
dozens of fields per GPU per cycle, so reading them one attribute at a time costs milliseconds. The
result array is plain memory in NVML's documented layout, so one precompiled struct.Struct (offsets
taken from pynvml's own ctypes structure) unpacks all of it at C speed into the plain Python numbers
the readers consume. numpy did the same in twice the time: for a few dozen entries its per-operation
overhead dominates. A result that is not a ctypes array is read attribute by attribute.
"""

from __future__ import annotations

import ctypes
import functools
import struct
from collections.abc import Sequence
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

# scopeId asking for the sum over all links (nvml.h, NVLink throughput fields)
UINT_MAX = 0xFFFFFFFF
# c_nvmlFieldValue_t members read, in the order unpacked; the value union as its widest unsigned member,
# narrowed by valueType afterwards
MEMBERS = (
    ("fieldId", "I"),
    ("scopeId", "I"),
    ("timestamp", "q"),
    ("valueType", "I"),
    ("nvmlReturn", "I"),
    ("value", "Q"),
)
_ID, _SCOPE, _TIMESTAMP, _TYPE, _RETURN, _VALUE = range(len(MEMBERS))


class Fields(NamedTuple):
    """One entry per requested field, in request order."""

    field_id: Sequence[int]
    scope: Sequence[int]
    status: Sequence[int]  # NVML_SUCCESS or the field's own error code
    value: Sequence[float]  # whatever the field's value type, as a Python number
    timestamp_us: Sequence[int]  # when the driver took the value (CPU clock, microseconds)


def layout(ctype: Any, members: Sequence[tuple[str, str]], count: int = 1) -> struct.Struct:
    """A little-endian struct for `count` consecutive `ctype`s, reading `members` (name, struct code) of
    each at the offsets ctypes gives them and skipping the rest."""
    parts, position = [], 0
    for name, code in sorted(members, key=lambda member: getattr(ctype, member[0]).offset):
        offset, size = getattr(ctype, name).offset, struct.calcsize("<" + code)
        if offset < position or size > getattr(ctype, name).size:
            raise ValueError(f"{ctype.__name__}.{name}: unexpected layout")
        parts.append(f"{offset - position}x{code}" if offset > position else code)
        position = offset + size
    one = "".join(parts) + f"{ctypes.sizeof(ctype) - position}x"
    return struct.Struct("<" + one * count)


@functools.cache
def _field_layout(ctype: Any, count: int) -> tuple[struct.Struct, tuple[int, ...]]:
    """The struct for `count` results, and the order its members come out in (by offset)."""
    by_offset = sorted(range(len(MEMBERS)), key=lambda i: getattr(ctype, MEMBERS[i][0]).offset)
    return layout(ctype, MEMBERS, count), tuple(by_offset.index(i) for i in range(len(MEMBERS)))


@functools.cache
def field_dtype(struct_type: Any) -> np.dtype:
    """A numpy view of c_nvmlFieldValue_t, with the value union read five ways; offsets from ctypes.
    (The fake NVML fills its results through it, as the driver writes the C array.)"""
    value = struct_type.value.offset
    return np.dtype(
        {
            "names": ["fieldId", "scopeId", "timestamp", "valueType", "nvmlReturn", "d", "ui", "ull", "sll", "si"],
            "formats": ["<u4", "<u4", "<i8", "<u4", "<u4", "<f8", "<u4", "<u8", "<i8", "<i4"],
            "offsets": [
                struct_type.fieldId.offset,
                struct_type.scopeId.offset,
                struct_type.timestamp.offset,
                struct_type.valueType.offset,
                struct_type.nvmlReturn.offset,
                value,
                value,
                value,
                value,
                value,
            ],
            "itemsize": ctypes.sizeof(struct_type),
        }
    )


def decode(nvml: ModuleType, results: Any) -> Fields:
    if isinstance(results, ctypes.Array):
        unpack, position = _field_layout(nvml.c_nvmlFieldValue_t, len(results))
        flat = unpack.unpack(memoryview(results).cast("B"))
        step = len(MEMBERS)
        kinds = flat[position[_TYPE] :: step]
        raw_values = flat[position[_VALUE] :: step]
        value: Sequence[float] = raw_values
        unsigned_long_long = nvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
        if kinds.count(unsigned_long_long) != len(kinds):  # the common case (counters) needs no narrowing
            value = [
                raw if kind == unsigned_long_long else _narrow(nvml, kind, raw)
                for kind, raw in zip(kinds, raw_values, strict=True)
            ]
        return Fields(
            flat[position[_ID] :: step],
            flat[position[_SCOPE] :: step],
            flat[position[_RETURN] :: step],
            value,
            flat[position[_TIMESTAMP] :: step],
        )
    items = list(results)
    return Fields(
        tuple(int(r.fieldId) for r in items),
        tuple(int(r.scopeId) for r in items),
        tuple(int(r.nvmlReturn) for r in items),
        tuple(_slow_value(nvml, r) for r in items),
        tuple(int(r.timestamp) for r in items),
    )


def _narrow(nvml: ModuleType, kind: int, raw: int) -> float:
    """The union's 8 bytes (as an unsigned little-endian integer) read as the member `kind` names."""
    if kind == nvml.NVML_VALUE_TYPE_DOUBLE:
        return float(struct.unpack("<d", struct.pack("<Q", raw))[0])
    if kind == nvml.NVML_VALUE_TYPE_UNSIGNED_INT:
        return raw & 0xFFFFFFFF
    if kind == nvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return raw - (1 << 64) if raw >= 1 << 63 else raw
    if kind == nvml.NVML_VALUE_TYPE_SIGNED_INT:
        low = raw & 0xFFFFFFFF
        return low - (1 << 32) if low >= 1 << 31 else low
    return raw


def _slow_value(nvml: ModuleType, result: Any) -> float:
    kind = result.valueType
    if kind == nvml.NVML_VALUE_TYPE_DOUBLE:
        return float(result.value.dVal)
    if kind == nvml.NVML_VALUE_TYPE_UNSIGNED_INT:
        return float(result.value.uiVal)
    if kind == nvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return float(result.value.sllVal)
    if kind == nvml.NVML_VALUE_TYPE_SIGNED_INT:
        return float(result.value.siVal)
    return float(result.value.ullVal)


def text(value: str | bytes) -> str:
    """An NVML string: str from current bindings, bytes from older ones."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
