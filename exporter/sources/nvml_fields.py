"""Decoding nvmlDeviceGetFieldValues results in one vectorised pass.

pynvml's structures decode every attribute access in Python (~2 µs each); an 8-GPU node asks for
dozens of fields per GPU per cycle, so reading them one attribute at a time costs milliseconds. The
result array is plain memory in NVML's documented layout, so numpy reads it directly. If the layout
ever differs from what we expect, we fall back to attribute access.
"""

from __future__ import annotations

import ctypes
import functools
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

# scopeId asking for the sum over all links (nvml.h, NVLink throughput fields)
UINT_MAX = 0xFFFFFFFF


class Fields(NamedTuple):
    """One entry per requested field, in request order."""

    field_id: np.ndarray
    scope: np.ndarray
    status: np.ndarray  # NVML_SUCCESS or the field's own error code
    value: np.ndarray  # float64, whatever the field's value type
    timestamp_us: np.ndarray  # when the driver took the value (CPU clock, microseconds)


@functools.cache
def field_dtype(struct: Any) -> np.dtype:
    """A numpy view of c_nvmlFieldValue_t, with the value union read five ways; offsets from ctypes."""
    value = struct.value.offset
    return np.dtype(
        {
            "names": ["fieldId", "scopeId", "timestamp", "valueType", "nvmlReturn", "d", "ui", "ull", "sll", "si"],
            "formats": ["<u4", "<u4", "<i8", "<u4", "<u4", "<f8", "<u4", "<u8", "<i8", "<i4"],
            "offsets": [
                struct.fieldId.offset,
                struct.scopeId.offset,
                struct.timestamp.offset,
                struct.valueType.offset,
                struct.nvmlReturn.offset,
                value,
                value,
                value,
                value,
                value,
            ],
            "itemsize": ctypes.sizeof(struct),
        }
    )


def decode(nvml: ModuleType, results: Any) -> Fields:
    if isinstance(results, ctypes.Array):
        raw = np.frombuffer(memoryview(results), dtype=field_dtype(nvml.c_nvmlFieldValue_t))
        kind = raw["valueType"]
        value = raw["ull"].astype(np.float64)  # the common case (counters); others patched in below
        for value_type, member in (
            (nvml.NVML_VALUE_TYPE_DOUBLE, "d"),
            (nvml.NVML_VALUE_TYPE_UNSIGNED_INT, "ui"),
            (nvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG, "sll"),
            (nvml.NVML_VALUE_TYPE_SIGNED_INT, "si"),
        ):
            mask = kind == value_type
            if mask.any():
                value[mask] = raw[member][mask]
        return Fields(raw["fieldId"], raw["scopeId"], raw["nvmlReturn"], value, raw["timestamp"])
    items = list(results)
    return Fields(
        np.array([r.fieldId for r in items], dtype=np.uint32),
        np.array([r.scopeId for r in items], dtype=np.uint32),
        np.array([r.nvmlReturn for r in items], dtype=np.uint32),
        np.array([_slow_value(nvml, r) for r in items], dtype=np.float64),
        np.array([r.timestamp for r in items], dtype=np.int64),
    )


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
