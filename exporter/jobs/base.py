"""The interfaces job attribution implements, and what it reports."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from gpuscope.exporter.snapshot import GpuIdentity, JobInfo

__all__ = ["JobInfo", "JobSource", "ListeningJobSource", "MigJobSource"]


class JobSource(Protocol):
    def assign(self, gpus: tuple[GpuIdentity, ...], now: float) -> dict[int, JobInfo]:
        """GPU index -> the job holding it now; GPUs without a job are left out."""
        ...


@runtime_checkable
class MigJobSource(Protocol):
    """A job source that can also tell the MIG devices of a GPU apart (Slurm gives each its own job)."""

    def assign_mig(self, migs: Mapping[int, tuple[str, ...]], now: float) -> dict[str, JobInfo]:
        """`migs`: GPU index -> the UUIDs of its MIG devices, for the GPUs in MIG mode. Returns MIG device
        UUID -> the job holding it now; MIG devices without a job are left out."""
        ...


@runtime_checkable
class ListeningJobSource(Protocol):
    """A job source that learns in a thread of its own (the Kubernetes listener), so that assign() only
    reads what it learnt and a slow scheduler never delays a sampling cycle."""

    def run(self, stop: threading.Event) -> None:
        """Listen until `stop` is set."""
        ...
