"""One source made of a GPU backend and the InfiniBand ports of the same node."""

from __future__ import annotations

from gpuscope.exporter.snapshot import GpuReading, PortReading
from gpuscope.exporter.sources.base import Source


class CombinedSource:
    def __init__(self, gpu: Source | None, fabric: Source | None) -> None:
        if gpu is None and fabric is None:
            raise ValueError("a combined source needs at least one part")
        self.parts = tuple(part for part in (gpu, fabric) if part is not None)
        self.name = "+".join(part.name for part in self.parts)
        self._gpu = gpu
        self._fabric = fabric
        self.driver_version: str = getattr(gpu, "driver_version", "")

    def read(self, now: float) -> tuple[tuple[GpuReading, ...], tuple[PortReading, ...]]:
        gpus = self._gpu.read(now)[0] if self._gpu else ()
        ports = self._fabric.read(now)[1] if self._fabric else ()
        return gpus, ports

    def close(self) -> None:
        for part in self.parts:
            part.close()
