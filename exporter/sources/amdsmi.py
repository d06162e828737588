"""AMD GPUs through amdsmi (ROCm). Not implemented yet: the backend reports itself unavailable."""

from __future__ import annotations

from exporter.snapshot import GpuReading, PortReading
from exporter.sources.base import BackendUnavailable


class AmdSmiSource:
    name = "amdsmi"

    def __init__(self) -> None:
        raise BackendUnavailable("the AMD SMI backend is not implemented in this version of gpuscope yet")

    def read(self, now: float) -> tuple[tuple[GpuReading, ...], tuple[PortReading, ...]]:
        raise NotImplementedError

    def close(self) -> None:
        pass
