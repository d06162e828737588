"""What a scheduler adapter does for the health loop: drain a node, resume it, and say how it stands."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

REASON_PREFIX = "gpuscope: "  # every drain gpuscope makes says so, and it resumes only those


@dataclass(frozen=True)
class Outcome:
    ok: bool
    detail: str  # the command as run and what it said


@dataclass(frozen=True)
class SchedulerNode:
    drained: bool  # no new work lands on it (Slurm DRAIN or DOWN; Kubernetes cordoned)
    reason: str  # the drain's reason ("" if none)

    @property
    def ours(self) -> bool:
        return self.reason.startswith(REASON_PREFIX)


class Scheduler(Protocol):
    name: str

    def command(self, action: str, node: str, reason: str = "") -> str:
        """The command `action` (drain | resume) would run, in words: what a dry run records."""
        ...

    async def drain(self, node: str, reason: str) -> Outcome: ...

    async def resume(self, node: str) -> Outcome: ...

    async def nodes(self, names: Iterable[str]) -> dict[str, SchedulerNode]:
        """How the scheduler sees these nodes; a node it does not know is left out."""
        ...


class GpuScheduler(Scheduler, Protocol):
    """A scheduler that can also keep one GPU from new work while its node stays in service (Kubernetes
    with DRA device taints); the loop takes out the GPU instead of the node where the finding names one."""

    async def gpu_drain_supported(self, node: str) -> bool: ...

    async def drain_gpu(self, node: str, gpu_uuid: str | None, gpu_index: int | None, reason: str) -> Outcome: ...

    async def resume_gpu(self, node: str, gpu_uuid: str | None, gpu_index: int | None) -> Outcome: ...

    async def gpu_drains(self, node: str) -> list[Any]:
        """gpuscope's device drains on `node`; raises RuntimeError when they cannot be listed."""
        ...
