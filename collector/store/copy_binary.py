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


def encode(columns: Sequence[CopyColumn]) -> memoryview:
    """The rows as binary COPY data, written into one buffer: a large group (a group commit is ~20,000
    rows, ~7 MB) costs page faults and copies for every intermediate bytes object."""
    rows = len(columns[0].values) if columns else 0
    wire = [_to_wire(column) for column in columns]
    values = [w for w, _ in wire]
    nulls = np.stack([mask for _, mask in wire], axis=1) if rows else np.zeros((0, len(columns)), dtype=bool)
    groups: list[tuple[np.ndarray, np.ndarray | None]]
    if not nulls.any():  # the usual batch: every row reports every column, one layout for all
        groups = [(np.zeros(len(columns), dtype=bool), None)] if rows else []
    else:
        # Each row's NULL pattern as bytes (8 columns per byte): a 1-D key to group rows by.
        packed = np.packbits(nulls, axis=1)
        keys = packed.view(np.dtype((np.void, packed.shape[1]))).reshape(-1)
        groups = []
        for key in np.unique(keys):
            members = np.flatnonzero(keys == key)
            groups.append((nulls[members[0]], members))
    layouts = [_layout(values, pattern) for pattern, _ in groups]
    sizes = [
        layout.itemsize * (rows if members is None else len(members))
        for layout, (_, members) in zip(layouts, groups, strict=True)
    ]
    out = np.empty(len(HEADER) + sum(sizes) + len(TRAILER), dtype=np.uint8)
    out[: len(HEADER)] = np.frombuffer(HEADER, dtype=np.uint8)
    offset = len(HEADER)
    for layout, size, (pattern, rows_of_group) in zip(layouts, sizes, groups, strict=True):
        _fill(out[offset : offset + size].view(layout), values, pattern, rows_of_group)
        offset += size
    out[offset:] = np.frombuffer(TRAILER, dtype=np.uint8)
    return out.data


def _to_wire(column: CopyColumn) -> tuple[np.ndarray, np.ndarray]:
    """(values in their binary COPY dtype, NULL mask)."""
    dtype = WIRE_TYPES[column.pg_type]
    values = column.values
    if values.dtype.kind == "f":
        mask = np.isnan(values)
    elif values.dtype == np.int64:
        mask = values == NULL_INT
    else:
        mask = np.zeros(len(values), dtype=bool)
    if values.dtype.kind in "fi" and mask.any():
        values = np.where(mask, 0, values)
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


def _layout(values: list[np.ndarray], null_pattern: np.ndarray) -> np.dtype:
    """One row's fields when the columns `null_pattern` is true for are NULL: a 16-bit field count, then
    per column a 32-bit length and, unless NULL, the value (dtypes already big-endian)."""
    fields: list[tuple[str, str]] = [("count", ">i2")]
    for i, (column, is_null) in enumerate(zip(values, null_pattern, strict=True)):
        fields.append((f"len{i}", ">i4"))
        if not is_null:
            fields.append((f"val{i}", column.dtype.str))
    return np.dtype(fields)


def _fill(record: np.ndarray, values: list[np.ndarray], null_pattern: np.ndarray, members: np.ndarray | None) -> None:
    """Write the rows `members` (None: all rows), which share `null_pattern`, into `record`."""
    # The field count and lengths are the same in every row: one broadcast of a template row sets them
    # all (a field-by-field fill would walk the whole array once per column).
    template = np.zeros(1, dtype=record.dtype)
    template["count"] = len(values)
    for i, (column, is_null) in enumerate(zip(values, null_pattern, strict=True)):
        template[f"len{i}"] = -1 if is_null else column.dtype.itemsize
    record[...] = template
    for i, (column, is_null) in enumerate(zip(values, null_pattern, strict=True)):
        if not is_null:
            record[f"val{i}"] = column if members is None else column[members]
