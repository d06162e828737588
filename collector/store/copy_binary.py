"""Builds PostgreSQL binary COPY data from columns with numpy, without a Python loop per row.

Binary COPY rows are variable-length only where a value is NULL, so rows are grouped by their
pattern of NULLs (few per batch: a metric a GPU lacks is missing in every row for that GPU) and each
group is laid out as one fixed-width numpy record array. Format: the PostgreSQL docs, "COPY" ->
"Binary Format": signature, flags, header extension, then per row a 16-bit field count and per field a
32-bit length (-1 for NULL) and the value in network byte order; a -1 field count ends the data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuscope.collector.store.columns import NULL_INT

HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
TRAILER = b"\xff\xff"
PG_EPOCH_US = 946_684_800 * 1_000_000  # 2000-01-01 in Unix microseconds

# pg type -> big-endian numpy dtype of its binary representation
WIRE_TYPES = {
    "timestamptz": ">i8",
    "int2": ">i2",
    "int4": ">i4",
    "int8": ">i8",
    "float4": ">f4",
    "float8": ">f8",
    "bool": "u1",
}


# The range of each integer type: a value outside it is refused here, never wrapped around.
INT_RANGES = {"int2": (-(2**15), 2**15 - 1), "int4": (-(2**31), 2**31 - 1), "int8": (-(2**63), 2**63 - 1)}


@dataclass(frozen=True)
class CopyColumn:
    pg_type: str
    # float64 with NaN for NULL; or ints (int64: NULL_INT for NULL) or bools; timestamptz: Unix seconds
    values: np.ndarray


def encode(columns: Sequence[CopyColumn]) -> bytes:
    rows = len(columns[0].values) if columns else 0
    wire = [_to_wire(column) for column in columns]
    nulls = np.stack([mask for _, mask in wire], axis=1) if rows else np.zeros((0, len(columns)), dtype=bool)
    # Each row's NULL pattern as bytes (8 columns per byte): a 1-D key to group rows by.
    packed = np.packbits(nulls, axis=1)
    keys = packed.view(np.dtype((np.void, packed.shape[1]))).reshape(-1) if rows else np.empty(0, dtype="V1")
    parts = [HEADER]
    for key in np.unique(keys):
        members = np.flatnonzero(keys == key)
        parts.append(_encode_group([w for w, _ in wire], nulls[members[0]], members))
    parts.append(TRAILER)
    return b"".join(parts)


def _to_wire(column: CopyColumn) -> tuple[np.ndarray, np.ndarray]:
    """(values in their binary COPY dtype, NULL mask)."""
    dtype = WIRE_TYPES[column.pg_type]
    values = column.values
    if values.dtype.kind == "f":
        mask = np.isnan(values)
        values = np.where(mask, 0, values)
    elif values.dtype == np.int64:
        mask = values == NULL_INT
        values = np.where(mask, 0, values)
    else:
        mask = np.zeros(len(values), dtype=bool)
    if column.pg_type == "timestamptz":
        values = np.rint(values * 1_000_000).astype(np.int64) - PG_EPOCH_US
    elif column.pg_type in INT_RANGES:
        if values.dtype.kind == "f":
            values = np.rint(values)
        _check_range(column.pg_type, values)
        values = values.astype(np.int64)
    return values.astype(dtype), mask


def _check_range(pg_type: str, values: np.ndarray) -> None:
    """Refuse, rather than wrap, a value its integer type cannot hold (validation keeps them out;
    this is the last line: float 2^63 cast to int64 would be stored as -2^63)."""
    if not len(values):
        return
    low, high = INT_RANGES[pg_type]
    smallest, largest = values.min(), values.max()
    if values.dtype.kind == "f":  # doubles compared with doubles: 2^63 itself is out
        fits = smallest >= float(low) and largest < -float(low)
    else:
        fits = low <= int(smallest) and int(largest) <= high
    if not fits:
        raise ValueError(f"{pg_type} value out of range: {smallest} .. {largest}")


def _encode_group(values: list[np.ndarray], null_pattern: np.ndarray, members: np.ndarray) -> bytes:
    fields: list[tuple[str, str]] = [("count", ">i2")]
    for i, (column, is_null) in enumerate(zip(values, null_pattern, strict=True)):
        fields.append((f"len{i}", ">i4"))
        if not is_null:
            fields.append((f"val{i}", column.dtype.str))
    record = np.empty(len(members), dtype=np.dtype(fields))
    record["count"] = len(values)
    for i, (column, is_null) in enumerate(zip(values, null_pattern, strict=True)):
        if is_null:
            record[f"len{i}"] = -1
        else:
            record[f"len{i}"] = column.dtype.itemsize
            record[f"val{i}"] = column[members]
    return record.tobytes()
