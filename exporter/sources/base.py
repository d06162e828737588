"""The interface every telemetry source implements."""

from __future__ import annotations

from typing import Protocol

from gpuscope.exporter.snapshot import GpuReading, PortReading


class BackendUnavailable(RuntimeError):
    """The library or driver a backend needs is missing; the message says what to install."""


class Source(Protocol):
    name: str

    def read(self, now: float) -> tuple[tuple[GpuReading, ...], tuple[PortReading, ...]]:
        """One pass over the hardware at wall-clock time `now` (seconds since the epoch)."""
        ...

    def close(self) -> None: ...
