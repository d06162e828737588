"""What the straggler detector reports: a straggler declared, its figures updated, its end; each naming the
straggler by a key that stays the same for its whole life, so that whoever keeps them (the watch's rows,
a bench's tally) follows it by that key and never holds on to the detector's own state."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

EventKind = Literal["declared", "updated", "ended"]


class StragglerKey(NamedTuple):
    """Which straggler: its place, its cause and when it started (unique in one detector: it has one
    straggler active at a time, and the next one starts after that one ended)."""

    node: int
    gpu: int | None
    port: int | None
    cause: str
    started_s: float


@dataclass(frozen=True)
class Straggler:
    """A declared straggler as it stands: where, why, how bad, since when (and until when, once over)."""

    node: int  # position of the node in the job; -1 for a finding about the whole job (fabric)
    gpu: int | None  # local GPU index on that node; None for a node or NIC
    port: int | None  # position of the port in the job's ports (slow_nic); None otherwise
    cause: str  # thermal | power_cap | gpu_degraded | nvlink | slow_nic | slow_host | fabric
    started_s: float
    slowdown: float  # estimated job slowdown: the median of the (latest) estimates while active
    declared_s: float = 0.0  # when persistence was reached: started_s + persist_s at the earliest
    evidence: dict[str, float] = field(default_factory=dict)  # as found when declared
    ended_s: float | None = None

    @property
    def key(self) -> StragglerKey:
        return StragglerKey(self.node, self.gpu, self.port, self.cause, self.started_s)


@dataclass(frozen=True)
class StragglerEvent:
    """A change to one straggler: `declared` (it reached persistence), `updated` (its slowdown estimate
    moved) or `ended` (gone for the persistence time; `ended_s` set); `straggler` as it stands after it."""

    kind: EventKind
    straggler: Straggler

    @property
    def key(self) -> StragglerKey:
        return self.straggler.key


class Findings:
    """Every straggler a run of a detector reported, as it last stood, in the order declared: for a run
    scored as a whole (the benches, the tests), where nothing is stored as it goes."""

    def __init__(self) -> None:
        self._latest: dict[StragglerKey, Straggler] = {}

    def add(self, events: Iterable[StragglerEvent]) -> None:
        for event in events:
            self._latest[event.key] = event.straggler

    @property
    def stragglers(self) -> list[Straggler]:
        return list(self._latest.values())
