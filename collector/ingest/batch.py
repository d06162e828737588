"""What a decoded ingest batch is, whatever its wire format, and the error that rejects one."""

from __future__ import annotations

import uuid
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

FORMAT = "gpuscope-samples"
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
