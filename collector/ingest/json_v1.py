"""Format v1: one JSON object (usually gzip-encoded), sample columns as JSON arrays with null for
"not reported". The lists become numpy arrays after one type check each; the rules are shared."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from gpuscope.collector.ingest import samples as sample_rules
from gpuscope.collector.ingest.batch import MAX_JSON_BYTES, IngestError, Loc
from gpuscope.collector.ingest.header import Header, Scope, header, remember, require
from gpuscope.collector.ingest.samples import ExactInts
from gpuscope.collector.store.batch import Batch, JobRef, Samples
from gpuscope.collector.store.columns import GPU_COLUMNS, MIG_COLUMNS, PORT_COLUMNS, Column

VERSION = 1


NO_PORT_SAMPLES: dict[str, Any] = {"ts": [], "port": [], "values": {}}


def decode(raw: bytes, window: tuple[float, float], scope: Scope = None) -> Batch:
    doc = _parse_json(raw)
    meta = header(doc, VERSION, window, scope)
    ignored: set[str] = set()
    gpu_samples = _samples(
        require(doc, "gpu_samples", dict, ()),
        ("gpu_samples",),
        "gpu",
        GPU_COLUMNS,
        [g.index for g in meta.inventory.gpus],
        window,
        ignored,
        meta.jobs,
    )
    port_samples = _samples(
        NO_PORT_SAMPLES if doc.get("port_samples") is None else doc["port_samples"],
        ("port_samples",),
        "port",
        PORT_COLUMNS,
        range(len(meta.inventory.ports)),
        window,
        ignored,
    )
    migs = mig_samples(doc, meta, window, ignored)
    remember(meta)
    return to_batch(meta, gpu_samples, port_samples, ignored, migs)


def mig_samples(doc: dict[str, Any], meta: Header, window: tuple[float, float], ignored: set[str]) -> Samples | None:
    """The MIG devices' rows: JSON arrays in both versions (a few per GPU and cycle); None when the
    sender lists no MIG devices and sends no rows."""
    obj = doc.get("mig_samples")
    if obj is None and not meta.migs:
        return None
    obj = NO_MIG_SAMPLES if obj is None else obj
    job_sent = isinstance(obj, dict) and obj.get("job") is not None  # optional: left out, no MIG allocation changes
    return _samples(
        obj,
        ("mig_samples",),
        "mig",
        MIG_COLUMNS,
        range(len(meta.migs)),
        window,
        ignored,
        meta.jobs if job_sent else None,
    )


NO_MIG_SAMPLES: dict[str, Any] = {"ts": [], "mig": [], "values": {}}


def to_batch(
    meta: Header, gpu_samples: Samples, port_samples: Samples, ignored: set[str], migs: Samples | None = None
) -> Batch:
    inventory = meta.inventory
    return Batch(
        exporter_id=meta.exporter_id,
        seq=meta.seq,
        cluster=inventory.cluster,
        rack=inventory.rack,
        node=inventory.node,
        backend=inventory.backend,
        gpus=inventory.gpus,
        ports=inventory.ports,
        jobs=meta.jobs or (),
        events=meta.events,
        gpu_samples=gpu_samples,
        port_samples=port_samples,
        ignored_fields=tuple(sorted(ignored)),
        migs=meta.migs,
        mig_samples=migs,
    )


def _parse_json(raw: bytes) -> Any:
    # orjson: several times faster than the json module, strict (no NaN or Infinity, UTF-8 only).
    if len(raw) > MAX_JSON_BYTES:
        raise IngestError(413, ("body",), f"JSON text exceeds {MAX_JSON_BYTES} bytes (after decompression)")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "UTF-8" in str(exc):
            raise IngestError(400, ("body",), "body is not UTF-8") from None
        near = raw[exc.pos : exc.pos + 9]
        if near.startswith((b"NaN", b"Infinity", b"-Infinity")):
            raise IngestError(
                400, ("body",), f"invalid JSON: NaN and Infinity are not allowed (at char {exc.pos})"
            ) from None
        raise IngestError(400, ("body",), f"invalid JSON: {exc}") from None


def _samples(
    obj: Any,
    loc: Loc,
    device_key: str,
    columns: Sequence[Column],
    listed: Sequence[int],
    window: tuple[float, float],
    ignored: set[str],
    jobs: tuple[JobRef, ...] | None = None,
) -> Samples:
    if not isinstance(obj, dict):
        raise IngestError(422, loc, "must be an object" + ("" if device_key == "gpu" else " (or omitted)"))
    ts_list = require(obj, "ts", list, loc)
    sample_rules.check_rows(len(ts_list), loc)
    ts = _numbers(ts_list, (*loc, "ts"), nullable=False)
    rows = len(ts)
    device = _numbers(require(obj, device_key, list, loc), (*loc, device_key), nullable=False, length=rows)
    up = None
    if device_key == "gpu":
        flags = require(obj, "up", list, loc)
        if len(flags) != rows or not all(type(f) is bool for f in flags):
            raise IngestError(422, (*loc, "up"), f"must be {rows} booleans, one per row")
        up = np.array(flags, dtype=bool)
    job = None
    if jobs is not None:
        refs = _numbers(require(obj, "job", list, loc), (*loc, "job"), nullable=True, length=rows)
        fractional = ~np.isnan(refs) & (refs != np.floor(refs))
        job = np.where(np.isnan(refs), -1, np.where(fractional, -2, refs))  # -2: refused by the rule
    raw_values = require(obj, "values", dict, loc)
    known = {c.key: c for c in columns}
    present = [known[key] for key in raw_values if key in known]
    ignored.update(key for key in raw_values if key not in known)
    matrix, exact = _matrix(raw_values, present, (*loc, "values"), rows)
    return sample_rules.samples(
        loc,
        device_key,
        ts,
        device,
        listed,
        window,
        (present, matrix),
        up=up,
        job=job,
        job_count=len(jobs or ()),
        exact=exact,
    )


EXACT_DOUBLE = 2.0**53  # every integer up to this is a double; above it, JSON integers are kept as ints
COLUMN_AT_A_TIME = 100_000  # values: a larger matrix is converted a column at a time


def _matrix(raw: dict[str, Any], present: list[Column], loc: Loc, rows: int) -> tuple[np.ndarray, ExactInts]:
    """The metric columns as one (columns x rows) float64 array, NaN for null (one type pass), and the
    JSON integers of integer columns that a double would round (above 2^53), by (column, row)."""
    series = [raw[column.key] for column in present]
    for column, items in zip(present, series, strict=True):
        if not isinstance(items, list):
            raise IngestError(422, (*loc, column.key), "must be an array")
        if len(items) != rows:
            raise IngestError(422, (*loc, column.key), f"has {len(items)} entries, expected {rows} (one per row)")
    if not {type(v) for items in series for v in items} <= {int, float, type(None)}:
        for column, items in zip(present, series, strict=True):
            _numbers(items, (*loc, column.key), nullable=True)  # raises, naming the entry
    if len(present) * rows <= COLUMN_AT_A_TIME:
        matrix = np.array(series, dtype=np.float64).reshape(len(present), rows)
    else:  # a column at a time: other threads (the event loop) run in between
        matrix = np.empty((len(present), rows))
        for i, items in enumerate(series):
            matrix[i] = np.array(items, dtype=np.float64)
    exact: ExactInts = {}
    integer_rows = [i for i, column in enumerate(present) if column.integer]
    if integer_rows:
        for n, row in np.argwhere(np.abs(matrix[integer_rows]) >= EXACT_DOUBLE).tolist():  # NaN compares False
            value = series[integer_rows[n]][row]
            if type(value) is int:
                exact[(integer_rows[n], row)] = value
    return matrix, exact


def _numbers(items: list[Any], loc: Loc, nullable: bool, length: int | None = None) -> np.ndarray:
    if length is not None and len(items) != length:
        raise IngestError(422, loc, f"has {len(items)} entries, expected {length} (one per row)")
    allowed = (int, float, type(None)) if nullable else (int, float)
    if not {type(v) for v in items} <= set(allowed):
        i = next(i for i, v in enumerate(items) if type(v) not in allowed)
        raise IngestError(422, (*loc, i), "must be a number" + (" or null" if nullable else ""))
    array = np.array(items, dtype=np.float64)
    if np.isinf(array).any():
        raise IngestError(422, (*loc, int(np.argmax(np.isinf(array)))), "out of range (overflows a double)")
    return array
