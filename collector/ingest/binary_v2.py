"""Format v2: a short JSON header and the sample columns as little-endian binary arrays, read with
numpy.frombuffer: no JSON number parsing, no gzip, no Python object per value.

Layout (docs/ingest-format.md): b"GPSB", header length (u32), the header (the v1 object with each
sample block given as {"rows": N, "values": [keys]}), zero padding to a multiple of 8, then per block
(gpu_samples, port_samples): ts f64[N], one f64[N] per key (NaN: not reported), job i32[N] (gpu
block, only when the header lists jobs; -1: none), device u16[N], up u8[N] (gpu block), padding to 8.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gpuscope.collector.ingest import samples as sample_rules
from gpuscope.collector.ingest.batch import MAX_JSON_BYTES, IngestError, Loc
from gpuscope.collector.ingest.header import Scope, header, remember, require
from gpuscope.collector.ingest.json_v1 import _parse_json, mig_samples, to_batch
from gpuscope.collector.store.batch import Batch, Samples
from gpuscope.collector.store.columns import GPU_COLUMNS, PORT_COLUMNS, Column

VERSION = 2
MAGIC = b"GPSB"


def _padded(offset: int) -> int:
    return (offset + 7) // 8 * 8


def decode(raw: bytes, window: tuple[float, float], scope: Scope = None) -> Batch:
    if len(raw) < 8 or raw[:4] != MAGIC:
        raise IngestError(
            400, ("body",), f"not a binary gpuscope batch: it must start with {MAGIC!r}, this one starts {raw[:4]!r}"
        )
    header_length = int.from_bytes(raw[4:8], "little")
    if header_length > MAX_JSON_BYTES:
        raise IngestError(413, ("body",), f"header of {header_length} bytes: at most {MAX_JSON_BYTES}")
    if 8 + header_length > len(raw):
        raise IngestError(400, ("body",), f"header of {header_length} bytes does not fit in the body")
    doc = _parse_json(raw[8 : 8 + header_length])
    meta = header(doc, VERSION, window, scope)
    jobs = None if meta.jobs is None else len(meta.jobs)
    specs = {key: _spec(doc, key) for key in ("gpu_samples", "port_samples")}
    # The header says how long every array is: a body of another length has row counts (or keys,
    # or jobs) that do not match what was sent, and nothing in it can be read as intended.
    described = _padded(8 + header_length)
    for key, (rows, keys) in specs.items():
        row_bytes = 8 + 8 * len(keys) + 2 + (1 + (4 if jobs is not None else 0) if key == "gpu_samples" else 0)
        described = _padded(described + rows * row_bytes)
    if described != len(raw):
        what = (
            f"the body ends before the blocks its header describes ({len(raw)} bytes of {described})"
            if described > len(raw)
            else f"{len(raw) - described} bytes after the last block its header describes"
        )
        raise IngestError(400, ("body",), f"{what}: check each block's rows and values, and jobs")
    body = Body(raw, 8 + header_length)
    body.pad()
    ignored: set[str] = set()
    gpu_samples = _block(
        body,
        specs["gpu_samples"],
        "gpu_samples",
        GPU_COLUMNS,
        [g.index for g in meta.inventory.gpus],
        window,
        ignored,
        jobs,
    )
    port_samples = _block(
        body, specs["port_samples"], "port_samples", PORT_COLUMNS, range(len(meta.inventory.ports)), window, ignored
    )
    if body.offset != len(raw):
        raise IngestError(400, ("body",), f"{len(raw) - body.offset} bytes after the last block")
    migs = mig_samples(doc, meta, window, ignored)  # in the header, as JSON arrays
    remember(meta)
    return to_batch(meta, gpu_samples, port_samples, ignored, migs)


class Body:
    """Reads consecutive arrays out of the body, checking each fits."""

    def __init__(self, raw: bytes, offset: int) -> None:
        self.raw = raw
        self.offset = offset

    def take(self, dtype: str, count: int, loc: Loc) -> np.ndarray:
        size = np.dtype(dtype).itemsize * count
        if self.offset + size > len(self.raw):
            raise IngestError(400, loc, f"the body ends before this block's {count} rows")
        array = np.frombuffer(self.raw, dtype=dtype, count=count, offset=self.offset)
        self.offset += size
        return array

    def pad(self) -> None:
        end = _padded(self.offset)
        if self.raw[self.offset : end].strip(b"\0"):
            raise IngestError(400, ("body",), f"padding at byte {self.offset} must be zero bytes")
        self.offset = end


def _spec(doc: dict[str, Any], key: str) -> tuple[int, list[str]]:
    """A block's row count and metric keys, from the header."""
    loc: Loc = (key,)
    spec = require(doc, key, dict, ())
    rows = require(spec, "rows", int, loc)
    if rows < 0:
        raise IngestError(422, (*loc, "rows"), "must be >= 0")
    sample_rules.check_rows(rows, loc)
    keys = require(spec, "values", list, loc)
    if not all(isinstance(k, str) for k in keys) or len(set(keys)) != len(keys):
        raise IngestError(422, (*loc, "values"), "must be distinct metric keys")
    return rows, keys


# Per (block, keys as sent): the block's columns known, their rows in the block, and the keys not known.
# A kind of node sends the same keys in every batch; bounded, as a sender chooses its lists.
_KnownKeys = tuple[list[Column], list[int], list[str]]
_known: dict[tuple[str, tuple[str, ...]], _KnownKeys] = {}
MAX_KEY_LISTS = 256


def _known_keys(block: str, columns: Sequence[Column], keys: tuple[str, ...]) -> _KnownKeys:
    found = _known.get((block, keys))
    if found is None:
        if len(_known) >= MAX_KEY_LISTS:
            _known.clear()
        by_key = {c.key: c for c in columns}
        found = _known[(block, keys)] = (
            [by_key[k] for k in keys if k in by_key],
            [i for i, k in enumerate(keys) if k in by_key],
            [k for k in keys if k not in by_key],
        )
    return found


def _block(
    body: Body,
    spec: tuple[int, list[str]],
    key: str,
    columns: Sequence[Column],
    listed: Sequence[int],
    window: tuple[float, float],
    ignored: set[str],
    job_count: int | None = None,
) -> Samples:
    loc: Loc = (key,)
    rows, keys = spec
    ts = body.take("<f8", rows, loc)
    matrix = body.take("<f8", rows * len(keys), loc).reshape(len(keys), rows)
    present, kept, unknown = _known_keys(key, columns, tuple(keys))
    ignored.update(unknown)
    if len(kept) != len(keys):
        matrix = matrix[kept]
    job = body.take("<i4", rows, loc) if job_count is not None else None
    device_key = "gpu" if key == "gpu_samples" else "port"
    device = body.take("<u2", rows, loc)
    up = None
    if device_key == "gpu":
        flags = body.take("u1", rows, loc)
        if (flags > 1).any():
            raise IngestError(422, (*loc, "up", int(np.argmax(flags > 1))), "must be 0 or 1")
        up = flags.astype(bool)
    body.pad()
    return sample_rules.samples(
        loc, device_key, ts, device, listed, window, (present, matrix), up=up, job=job, job_count=job_count or 0
    )
