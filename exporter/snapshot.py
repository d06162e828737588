"""One sampling cycle's readings: what /metrics serves and what the pusher sends."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuIdentity:
    index: int
    uuid: str
    model: str
    pci_bus_id: str


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    user: str | None = None


@dataclass(frozen=True)
class PortIdentity:
    device: str  # e.g. mlx5_0
    port: int


@dataclass(frozen=True)
class GpuReading:
    gpu: GpuIdentity
    up: bool
    # Catalog key -> value in the catalog's native unit. A field the device does not
    # support is absent, never 0 or NaN.
    values: dict[str, float] = field(default_factory=dict)
    links: dict[int, dict[str, float]] = field(default_factory=dict)  # NVLink/XGMI link -> "nvlink" metrics
    xid_counts: dict[int, int] = field(default_factory=dict)  # XID code -> events since the exporter started


@dataclass(frozen=True)
class PortReading:
    port: PortIdentity
    values: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    ts: float  # seconds since the Unix epoch, when the cycle started
    gpus: tuple[GpuReading, ...]
    ports: tuple[PortReading, ...]
    sample_seconds: float = 0.0  # how long the cycle took
    jobs: dict[int, JobInfo] | None = None  # GPU index -> job; None when no job attribution is configured
