"""Rules for a batch's metadata (the JSON object of format v1, the JSON header of format v2): who
sent it, its devices, jobs and events. Every rule is listed in docs/ingest-format.md."""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from gpuscope.collector.ingest.batch import (
    FORMAT,
    MAX_DEVICES,
    MAX_EVENTS,
    MAX_FUTURE_SECONDS,
    MAX_JOB_NAME,
    MAX_NAME,
    MIN_TIMESTAMP,
    TIME_RULE,
    IngestError,
    Loc,
)
from gpuscope.collector.store.batch import EventIn, GpuInfo, JobRef, MigInfo, PortInfo


@dataclass(frozen=True)
class Inventory:
    cluster: str
    rack: str
    node: str
    backend: str
    gpus: tuple[GpuInfo, ...]
    ports: tuple[PortInfo, ...]


# Who may send a batch: None for any node (a shared token), or the (cluster, node) of a node's token.
Scope = tuple[str, str] | None


@dataclass(frozen=True)
class Header:
    exporter_id: uuid.UUID
    seq: int
    inventory: Inventory
    jobs: tuple[JobRef, ...] | None  # None: the exporter does not attribute jobs
    events: tuple[EventIn, ...]
    inventory_key: bytes | None = None  # checked now, not recognised: remember() it once the batch passes
    migs: tuple[MigInfo, ...] = ()  # the MIG devices seen during the batch (docs/ingest-format.md)


def header(doc: Any, version: int, window: tuple[float, float], scope: Scope = None) -> Header:
    """The batch's metadata, checked; a batch outside the token's `scope` gets 403 here, before its
    samples are read."""
    if not isinstance(doc, dict):
        raise IngestError(422, (), "body must be a JSON object")
    if doc.get("format") != FORMAT:
        raise IngestError(422, ("format",), f"must be {FORMAT!r}")
    sent = doc.get("version")
    if type(sent) is not int or sent != version:  # True == 1 and 1.0 == 1 in Python: neither is the integer 1
        raise IngestError(
            422, ("version",), f"unsupported version {sent!r} for this encoding: must be the integer {version}"
        )
    try:
        exporter_id = uuid.UUID(require(doc, "exporter_id", str, ()))
    except ValueError:
        raise IngestError(422, ("exporter_id",), "must be a UUID") from None
    seq = require(doc, "seq", int, ())
    if seq < 0 or seq >= 2**63:
        raise IngestError(422, ("seq",), "must be between 0 and 2^63-1")
    inventory, key = _inventory(doc)
    _authorize(inventory, scope)
    jobs = doc.get("jobs")
    events = doc.get("events")
    migs = doc.get("migs")
    gpu_indexes = {g.index for g in inventory.gpus}
    return Header(
        exporter_id=exporter_id,
        seq=seq,
        inventory=inventory,
        jobs=_jobs(jobs) if jobs is not None else None,
        events=_events(events, gpu_indexes, window) if events is not None else (),
        inventory_key=key,
        migs=_migs(migs, gpu_indexes) if migs is not None else (),
    )


def _authorize(inventory: Inventory, scope: Scope) -> None:
    """A node's token is valid for batches of that node of that cluster only (docs/ingest-format.md)."""
    if scope is None:
        return
    cluster, node = scope
    if inventory.cluster != cluster:
        raise IngestError(403, ("source", "cluster"), "this token is not valid for that cluster")
    if inventory.node != node:
        raise IngestError(403, ("source", "node"), "this token is not valid for that node")


class InventoryMemo:
    """Inventories already checked, by their serialised form (validation is a pure function of it), so
    an exporter's steady batches skip the checks. Least recently used go first once the entries pass
    `max_bytes` (counted as three times the key: about what the checked objects take)."""

    def __init__(self, max_bytes: int = 32 * 2**20) -> None:
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._entries: OrderedDict[bytes, Inventory] = OrderedDict()
        self._lock = threading.Lock()  # batches are decoded in worker threads too

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: bytes) -> Inventory | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: bytes, inventory: Inventory) -> None:
        cost = 3 * len(key)
        if cost > self.max_bytes:
            return
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return
            self._entries[key] = inventory
            self.nbytes += cost
            while self.nbytes > self.max_bytes:
                old, _ = self._entries.popitem(last=False)
                self.nbytes -= 3 * len(old)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.nbytes = 0


_checked = InventoryMemo()


def remember(meta: Header) -> None:
    """Keep a batch's checked inventory: call once the whole batch has passed (never for a rejected one)."""
    if meta.inventory_key is not None:
        _checked.put(meta.inventory_key, meta.inventory)


def _inventory(doc: dict[str, Any]) -> tuple[Inventory, bytes | None]:
    """The checked inventory, and its key when it was checked now (None: recognised)."""
    key = orjson.dumps([doc.get("source"), doc.get("gpus"), doc.get("ports")])
    known = _checked.get(key)
    if known is not None:
        return known, None
    source = require(doc, "source", dict, ())
    ports = doc.get("ports")
    inventory = Inventory(
        cluster=name(source, "cluster", ("source",)),
        rack=name(source, "rack", ("source",)),
        node=name(source, "node", ("source",)),
        backend=name(source, "backend", ("source",)) if source.get("backend") is not None else "unknown",
        gpus=_gpus(require(doc, "gpus", list, ())),
        ports=_ports(ports) if ports is not None else (),
    )
    return inventory, key


def _objects(items: Any, key: str, limit: int) -> Iterator[tuple[Loc, dict[str, Any]]]:
    """(location, object) for each entry of the list `key`, which must hold at most `limit` objects."""
    if not isinstance(items, list):
        raise IngestError(422, (key,), "must be an array")
    if len(items) > limit:
        raise IngestError(422, (key,), f"at most {limit:,} entries per batch")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise IngestError(422, (key, i), "must be an object")
        yield (key, i), item


def _events(items: Any, gpu_indexes: set[int], window: tuple[float, float]) -> tuple[EventIn, ...]:
    events = []
    for loc, item in _objects(items, "events", MAX_EVENTS):
        ts = item.get("ts")
        if not isinstance(ts, int | float) or isinstance(ts, bool):
            raise IngestError(422, (*loc, "ts"), "must be a number")
        oldest, now = window
        if not max(oldest, MIN_TIMESTAMP) <= ts <= now + MAX_FUTURE_SECONDS:
            raise IngestError(422, (*loc, "ts"), f"{ts:g} is out of range: expected {TIME_RULE}")
        gpu = item.get("gpu")
        if gpu is not None and (type(gpu) is not int or gpu not in gpu_indexes):
            raise IngestError(422, (*loc, "gpu"), "must be null or an index listed in gpus")
        kind = name(item, "kind", loc, 64)
        if not all(c.isascii() and (c.isalnum() or c == "_") for c in kind):
            raise IngestError(422, (*loc, "kind"), "must be letters, digits and underscores")
        code = item.get("code")
        if code is not None and (type(code) is not int or not 0 <= code < 2**31):
            raise IngestError(422, (*loc, "code"), "must be null or an integer between 0 and 2^31-1")
        count = item.get("count", 1)
        if type(count) is not int or not 1 <= count < 2**31:
            raise IngestError(422, (*loc, "count"), "must be an integer between 1 and 2^31-1")
        message = name(item, "message", loc, 1024) if item.get("message") is not None else None
        events.append(EventIn(float(ts), gpu, kind, code, count, message))
    return tuple(events)


def require(obj: dict[str, Any], key: str, kind: type, loc: Loc) -> Any:
    if key not in obj:
        raise IngestError(422, (*loc, key), "field required")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise IngestError(422, (*loc, key), f"must be {_KIND_NAMES[kind]}")
    return value


_KIND_NAMES = {str: "a string", int: "an integer", dict: "an object", list: "an array"}


def name(obj: dict[str, Any], key: str, loc: Loc, limit: int = MAX_NAME) -> str:
    value: str = require(obj, key, str, loc)
    if not value or len(value) > limit or not value.isprintable():
        raise IngestError(422, (*loc, key), f"must be 1 to {limit} printable characters")
    return value


def _gpus(items: list[Any]) -> tuple[GpuInfo, ...]:
    gpus = []
    seen = set()
    for loc, item in _objects(items, "gpus", MAX_DEVICES):
        index = require(item, "index", int, loc)
        if not 0 <= index < MAX_DEVICES:
            raise IngestError(422, (*loc, "index"), f"must be between 0 and {MAX_DEVICES - 1}")
        if index in seen:
            raise IngestError(422, (*loc, "index"), f"GPU index {index} listed twice")
        seen.add(index)
        gpus.append(GpuInfo(index, *(_known_or_empty(item, key, loc) for key in ("uuid", "model", "pci_bus_id"))))
    return tuple(gpus)


def _known_or_empty(obj: dict[str, Any], key: str, loc: Loc) -> str:
    """A GPU's uuid, model or pci_bus_id: "" when the exporter does not know it (a GPU it could not open),
    which the writer reads as "keep what is stored"; else 1-128 printable characters."""
    return "" if obj.get(key) == "" else name(obj, key, loc)


def _ports(items: Any) -> tuple[PortInfo, ...]:
    ports = []
    for loc, item in _objects(items, "ports", MAX_DEVICES):
        port = require(item, "port", int, loc)
        if not 1 <= port <= 255:
            raise IngestError(422, (*loc, "port"), "must be between 1 and 255")
        ports.append(PortInfo(name(item, "device", loc, 64), port))
    if len(set(ports)) != len(ports):
        raise IngestError(422, ("ports",), "a (device, port) pair is listed twice")
    return tuple(ports)


def _jobs(items: Any) -> tuple[JobRef, ...]:
    jobs = []
    for loc, item in _objects(items, "jobs", MAX_DEVICES):
        extra = {key: _optional_name(item, key, loc, limit) for key, limit in _SCHEDULER_JOB_FIELDS.items()}
        jobs.append(JobRef(name(item, "id", loc, MAX_JOB_NAME), _optional_name(item, "user", loc, MAX_NAME), **extra))
    return tuple(jobs)


# A job's scheduler fields (docs/ingest-format.md): on Kubernetes the pod holding the GPU, its container and
# workload; on Slurm the job's account and partition.
_SCHEDULER_JOB_FIELDS = {
    "namespace": 63, "pod": MAX_JOB_NAME, "container": 63, "workload": MAX_JOB_NAME,
    "account": MAX_NAME, "partition": MAX_NAME,
}  # fmt: skip


def _optional_name(item: dict[str, Any], key: str, loc: Loc, limit: int) -> str | None:
    """A name that may be left out or null."""
    return None if item.get(key) is None else name(item, key, loc, limit)


MAX_INSTANCE_ID = 255
MAX_SLICES = 32


def _migs(items: Any, gpu_indexes: set[int]) -> tuple[MigInfo, ...]:
    migs = []
    uuids: set[str] = set()
    for loc, item in _objects(items, "migs", MAX_DEVICES):
        gpu = require(item, "gpu", int, loc)
        if gpu not in gpu_indexes:
            raise IngestError(422, (*loc, "gpu"), "must be an index listed in gpus")
        ids = []
        for key in ("gpu_instance_id", "compute_instance_id"):
            value = require(item, key, int, loc)
            if not 0 <= value <= MAX_INSTANCE_ID:
                raise IngestError(422, (*loc, key), f"must be between 0 and {MAX_INSTANCE_ID}")
            ids.append(value)
        uuid_ = name(item, "uuid", loc)
        if uuid_ in uuids:
            raise IngestError(422, (*loc, "uuid"), f"MIG device {uuid_} listed twice")
        uuids.add(uuid_)
        profile = name(item, "profile", loc, 64)
        slices = require(item, "slices", int, loc)
        if not 1 <= slices <= MAX_SLICES:
            raise IngestError(422, (*loc, "slices"), f"must be between 1 and {MAX_SLICES}")
        gpu_slices = require(item, "gpu_slices", int, loc)
        if not slices <= gpu_slices <= MAX_SLICES:
            raise IngestError(422, (*loc, "gpu_slices"), f"must be between slices ({slices}) and {MAX_SLICES}")
        migs.append(MigInfo(gpu, ids[0], ids[1], uuid_, profile, slices, gpu_slices))
    return tuple(migs)
