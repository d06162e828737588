"""Decodes and validates one ingest batch, format `gpuscope-samples` version 1.

Every rule here is listed in docs/ingest-format.md. A batch is accepted whole or rejected whole:
the first violation found raises IngestError naming the field, and nothing is written.
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from collector.store.columns import GPU_COLUMNS, PORT_COLUMNS, Column

FORMAT = "gpuscope-samples"
VERSIONS = (1,)
MAX_FUTURE_SECONDS = 300.0
MIN_TIMESTAMP = 946_684_800.0  # 2000-01-01: anything older is a broken clock, not history
MAX_NAME = 128
MAX_DEVICES = 4096
MAX_ROWS = 1_000_000
MAX_EVENTS = 10_000
TIME_RULE = f"a timestamp within the retention period and at most {MAX_FUTURE_SECONDS:.0f} s in the future"

Loc = tuple[str | int, ...]


class IngestError(Exception):
    def __init__(self, status: int, loc: Loc, msg: str) -> None:
        super().__init__(f"{'.'.join(map(str, loc))}: {msg}" if loc else msg)
        self.status = status
        self.loc = loc
        self.msg = msg

    def detail(self) -> list[dict[str, Any]]:
        return [{"loc": list(self.loc), "msg": self.msg}]


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    model: str
    pci_bus_id: str


@dataclass(frozen=True)
class PortInfo:
    device: str
    port: int


@dataclass(frozen=True)
class JobRef:
    job_id: str
    user: str | None


@dataclass(frozen=True)
class EventIn:
    ts: float
    gpu: int | None  # GPU index, or None for the node
    kind: str
    code: int | None
    count: int
    message: str | None


@dataclass(frozen=True)
class Samples:
    ts: np.ndarray  # float64 seconds since the epoch
    device: np.ndarray  # int: GPU index, or position in `ports`
    values: dict[str, np.ndarray]  # column key -> float64, NaN where not reported
    up: np.ndarray | None = None  # bool, GPUs only
    job: np.ndarray | None = None  # int position in Batch.jobs, -1 for no job; None: attribution not reported

    def __len__(self) -> int:
        return len(self.ts)


@dataclass(frozen=True)
class Batch:
    exporter_id: uuid.UUID
    seq: int
    cluster: str
    rack: str
    node: str
    backend: str
    gpus: tuple[GpuInfo, ...]
    ports: tuple[PortInfo, ...]
    gpu_samples: Samples
    port_samples: Samples
    jobs: tuple[JobRef, ...]
    ignored_fields: tuple[str, ...]  # metric keys this collector does not know (newer exporter)
    events: tuple[EventIn, ...] = ()


def decompress(body: bytes, content_encoding: str | None, limit: int) -> bytes:
    encoding = (content_encoding or "identity").strip().lower()
    if encoding == "identity":
        return body
    if encoding != "gzip":
        raise IngestError(415, ("header", "Content-Encoding"), f"unsupported encoding {encoding!r}; use gzip")
    decompressor = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = decompressor.decompress(body, limit + 1)
    except zlib.error as exc:
        raise IngestError(400, ("body",), f"invalid gzip data: {exc}") from None
    if len(out) > limit or decompressor.unconsumed_tail:
        raise IngestError(413, ("body",), f"decompressed body exceeds {limit} bytes")
    return out


def decode(raw: bytes, now: float, oldest: float = MIN_TIMESTAMP) -> Batch:
    """`oldest`: samples before this (the retention horizon) are refused, as they would be dropped anyway."""
    doc = _parse_json(raw)
    if not isinstance(doc, dict):
        raise IngestError(422, (), "body must be a JSON object")
    if doc.get("format") != FORMAT:
        raise IngestError(422, ("format",), f"must be {FORMAT!r}")
    if doc.get("version") not in VERSIONS:
        raise IngestError(
            422, ("version",), f"unsupported version {doc.get('version')!r}; this collector reads {VERSIONS}"
        )
    try:
        exporter_id = uuid.UUID(_require(doc, "exporter_id", str, ()))
    except ValueError:
        raise IngestError(422, ("exporter_id",), "must be a UUID") from None
    seq = _require(doc, "seq", int, ())
    if seq < 0 or seq >= 2**63:
        raise IngestError(422, ("seq",), "must be between 0 and 2^63-1")
    source = _require(doc, "source", dict, ())
    names = {key: _name(source, key, ("source",)) for key in ("cluster", "rack", "node")}
    backend = _name(source, "backend", ("source",)) if "backend" in source else "unknown"
    gpus = _gpus(_require(doc, "gpus", list, ()))
    ports = _ports(_require(doc, "ports", list, ()))
    jobs = _jobs(doc["jobs"]) if "jobs" in doc else None
    ignored: set[str] = set()
    gpu_samples = _samples(
        _require(doc, "gpu_samples", dict, ()),
        ("gpu_samples",),
        "gpu",
        GPU_COLUMNS,
        {g.index for g in gpus},
        (oldest, now),
        ignored,
        jobs,
    )
    port_samples = _samples(
        doc.get("port_samples") or {"ts": [], "port": [], "values": {}},
        ("port_samples",),
        "port",
        PORT_COLUMNS,
        set(range(len(ports))),
        (oldest, now),
        ignored,
    )
    events = _events(doc["events"], {g.index for g in gpus}, (oldest, now)) if "events" in doc else ()
    return Batch(
        exporter_id=exporter_id,
        events=events,
        seq=seq,
        backend=backend,
        gpus=gpus,
        ports=ports,
        jobs=jobs or (),
        gpu_samples=gpu_samples,
        port_samples=port_samples,
        ignored_fields=tuple(sorted(ignored)),
        **names,
    )


def _events(items: Any, gpu_indexes: set[int], window: tuple[float, float]) -> tuple[EventIn, ...]:
    if not isinstance(items, list):
        raise IngestError(422, ("events",), "must be an array")
    if len(items) > MAX_EVENTS:
        raise IngestError(422, ("events",), f"at most {MAX_EVENTS} events per batch")
    events = []
    for i, item in enumerate(items):
        loc: Loc = ("events", i)
        if not isinstance(item, dict):
            raise IngestError(422, loc, "must be an object")
        ts = item.get("ts")
        if not isinstance(ts, int | float) or isinstance(ts, bool):
            raise IngestError(422, (*loc, "ts"), "must be a number")
        oldest, now = window
        if not max(oldest, MIN_TIMESTAMP) <= ts <= now + MAX_FUTURE_SECONDS:
            raise IngestError(422, (*loc, "ts"), f"{ts:g} is out of range: expected {TIME_RULE}")
        gpu = item.get("gpu")
        if gpu is not None and (type(gpu) is not int or gpu not in gpu_indexes):
            raise IngestError(422, (*loc, "gpu"), "must be null or an index listed in gpus")
        kind = _name(item, "kind", loc, 64)
        if not all(c.isascii() and (c.isalnum() or c == "_") for c in kind):
            raise IngestError(422, (*loc, "kind"), "must be letters, digits and underscores")
        code = item.get("code")
        if code is not None and (type(code) is not int or not 0 <= code < 2**31):
            raise IngestError(422, (*loc, "code"), "must be null or an integer between 0 and 2^31-1")
        count = item.get("count", 1)
        if type(count) is not int or not 1 <= count < 2**31:
            raise IngestError(422, (*loc, "count"), "must be an integer between 1 and 2^31-1")
        message = _name(item, "message", loc, 1024) if item.get("message") is not None else None
        events.append(EventIn(float(ts), gpu, kind, code, count, message))
    return tuple(events)


def _parse_json(raw: bytes) -> Any:
    # orjson: several times faster than the json module, strict (no NaN or Infinity, UTF-8 only).
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


def _require(obj: dict[str, Any], key: str, kind: type, loc: Loc) -> Any:
    if key not in obj:
        raise IngestError(422, (*loc, key), "field required")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise IngestError(422, (*loc, key), f"must be {_KIND_NAMES[kind]}")
    return value


_KIND_NAMES = {str: "a string", int: "an integer", dict: "an object", list: "an array"}


def _name(obj: dict[str, Any], key: str, loc: Loc, limit: int = MAX_NAME) -> str:
    value: str = _require(obj, key, str, loc)
    if not value or len(value) > limit or not value.isprintable():
        raise IngestError(422, (*loc, key), f"must be 1 to {limit} printable characters")
    return value


def _gpus(items: list[Any]) -> tuple[GpuInfo, ...]:
    if len(items) > MAX_DEVICES:
        raise IngestError(422, ("gpus",), f"at most {MAX_DEVICES} GPUs per batch")
    gpus = []
    seen = set()
    for i, item in enumerate(items):
        loc: Loc = ("gpus", i)
        if not isinstance(item, dict):
            raise IngestError(422, loc, "must be an object")
        index = _require(item, "index", int, loc)
        if not 0 <= index < MAX_DEVICES:
            raise IngestError(422, (*loc, "index"), f"must be between 0 and {MAX_DEVICES - 1}")
        if index in seen:
            raise IngestError(422, (*loc, "index"), f"GPU index {index} listed twice")
        seen.add(index)
        gpus.append(GpuInfo(index, _name(item, "uuid", loc), _name(item, "model", loc), _name(item, "pci_bus_id", loc)))
    return tuple(gpus)


def _ports(items: list[Any]) -> tuple[PortInfo, ...]:
    if len(items) > MAX_DEVICES:
        raise IngestError(422, ("ports",), f"at most {MAX_DEVICES} ports per batch")
    ports = []
    for i, item in enumerate(items):
        loc: Loc = ("ports", i)
        if not isinstance(item, dict):
            raise IngestError(422, loc, "must be an object")
        port = _require(item, "port", int, loc)
        if not 1 <= port <= 255:
            raise IngestError(422, (*loc, "port"), "must be between 1 and 255")
        ports.append(PortInfo(_name(item, "device", loc, 64), port))
    if len(set(ports)) != len(ports):
        raise IngestError(422, ("ports",), "a (device, port) pair is listed twice")
    return tuple(ports)


def _jobs(items: Any) -> tuple[JobRef, ...]:
    if not isinstance(items, list):
        raise IngestError(422, ("jobs",), "must be an array")
    if len(items) > MAX_DEVICES:
        raise IngestError(422, ("jobs",), f"at most {MAX_DEVICES} jobs per batch")
    jobs = []
    for i, item in enumerate(items):
        loc: Loc = ("jobs", i)
        if not isinstance(item, dict):
            raise IngestError(422, loc, "must be an object")
        user = item.get("user")
        if user is not None:
            user = _name(item, "user", loc)
        jobs.append(JobRef(_name(item, "id", loc), user))
    return tuple(jobs)


def _samples(
    obj: Any,
    loc: Loc,
    device_key: str,
    columns: Sequence[Column],
    devices: set[int],
    window: tuple[float, float],
    ignored: set[str],
    jobs: tuple[JobRef, ...] | None = None,
) -> Samples:
    if not isinstance(obj, dict):
        raise IngestError(422, loc, "must be an object")
    ts = _numbers(_require(obj, "ts", list, loc), (*loc, "ts"), nullable=False)
    rows = len(ts)
    if rows > MAX_ROWS:
        raise IngestError(413, (*loc, "ts"), f"at most {MAX_ROWS} rows per batch")
    _check_times(ts, (*loc, "ts"), window)
    device = _numbers(_require(obj, device_key, list, loc), (*loc, device_key), nullable=False, length=rows)
    unknown = ~np.isin(device, np.fromiter(devices, dtype=np.float64, count=len(devices)))
    if unknown.any():
        i = int(np.argmax(unknown))
        raise IngestError(422, (*loc, device_key, i), f"{device[i]:g} is not a {device_key} listed in this batch")
    # (ts to the microsecond, device) as one integer: a 1-D sort finds repeats far faster than unique(axis=1).
    keys = np.sort(np.rint(ts * 1e6).astype(np.int64) * MAX_DEVICES + device.astype(np.int64))
    repeats = int(np.count_nonzero(keys[1:] == keys[:-1]))
    if repeats:
        raise IngestError(422, loc, f"{repeats} duplicate ({device_key}, ts) pairs")
    up = None
    if device_key == "gpu":
        flags = _require(obj, "up", list, loc)
        if len(flags) != rows or not all(type(f) is bool for f in flags):
            raise IngestError(422, (*loc, "up"), f"must be {rows} booleans, one per row")
        up = np.array(flags, dtype=bool)
    job = None
    if jobs is not None:
        refs = _numbers(_require(obj, "job", list, loc), (*loc, "job"), nullable=True, length=rows)
        bad = ~np.isnan(refs) & ((refs < 0) | (refs >= len(jobs)) | (refs != np.floor(refs)))
        if bad.any():
            i = int(np.argmax(bad))
            raise IngestError(422, (*loc, "job", i), f"must be null or a position in jobs (0-{len(jobs) - 1})")
        job = np.where(np.isnan(refs), -1, refs).astype(np.int64)
    raw_values = _require(obj, "values", dict, loc)
    known = {c.key: c for c in columns}
    present = [known[key] for key in raw_values if key in known]
    ignored.update(key for key in raw_values if key not in known)
    values = _metric_values(raw_values, present, (*loc, "values"), rows)
    return Samples(ts=ts, device=device.astype(np.int64), values=values, up=up, job=job)


def _metric_values(raw: dict[str, Any], present: list[Column], loc: Loc, rows: int) -> dict[str, np.ndarray]:
    """All metric columns checked and converted at once: one pass over the values for their types,
    one 2-D array, one range comparison. Per-column work happens only to name a column at fault."""
    series = [raw[column.key] for column in present]
    for column, items in zip(present, series, strict=True):
        if not isinstance(items, list):
            raise IngestError(422, (*loc, column.key), "must be an array")
        if len(items) != rows:
            raise IngestError(422, (*loc, column.key), f"has {len(items)} entries, expected {rows} (one per row)")
    if not {type(v) for items in series for v in items} <= {int, float, type(None)}:
        for column, items in zip(present, series, strict=True):
            _numbers(items, (*loc, column.key), nullable=True)  # raises, naming the entry
    if not present:
        return {}
    matrix = np.array(series, dtype=np.float64).reshape(len(present), rows)
    low = np.array([[c.low] for c in present])
    high = np.array([[c.high] for c in present])
    with np.errstate(invalid="ignore"):
        bad = np.isinf(matrix) | (matrix < low) | (matrix > high)
    if bad.any():
        i, row = (int(x) for x in np.argwhere(bad)[0])
        column = present[i]
        value = matrix[i, row]
        if np.isinf(value):
            raise IngestError(422, (*loc, column.key, row), "out of range (overflows a double)")
        raise IngestError(
            422,
            (*loc, column.key, row),
            f"{value:g} is out of range: expected between {column.low:g} and {column.high:g}",
        )
    return {c.key: (np.rint(matrix[i]) if c.integer else matrix[i]) for i, c in enumerate(present)}


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


def _check_times(ts: np.ndarray, loc: Loc, window: tuple[float, float]) -> None:
    oldest, now = window
    _check_range(
        ts,
        loc,
        max(oldest, MIN_TIMESTAMP),
        now + MAX_FUTURE_SECONDS,
        TIME_RULE,
    )


def _check_range(array: np.ndarray, loc: Loc, low: float, high: float, expected: str) -> None:
    with np.errstate(invalid="ignore"):
        bad = (array < low) | (array > high)
    if bad.any():
        i = int(np.argmax(bad))
        raise IngestError(422, (*loc, i), f"{array[i]:g} is out of range: expected {expected}")
