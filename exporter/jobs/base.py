"""The interface job attribution implements, and what it reports."""

from __future__ import annotations

from typing import Protocol

from gpuscope.exporter.snapshot import GpuIdentity, JobInfo

__all__ = ["JobInfo", "JobSource"]


class JobSource(Protocol):
    def assign(self, gpus: tuple[GpuIdentity, ...], now: float) -> dict[int, JobInfo]:
        """GPU index -> the job holding it now; GPUs without a job are left out."""
        ...
