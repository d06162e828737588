"""When a count over a trailing window crosses a threshold: the moment a flap or repeat rule fires.

Each occurrence (a link flap, a throttled sample) has a time and a weight. An occurrence fires when the
total over [its time - window, its time] reaches a threshold that the total without it had not reached.
That depends only on the history, never on when the rule runs, so a finding re-found by the next
cycle has the same time, and the store keeps it once; and a device that stays over the threshold fires
once, not at every occurrence."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuscope.health.model import Severity


@dataclass(frozen=True)
class Occurrence:
    at: datetime
    weight: int


@dataclass(frozen=True)
class Crossing:
    at: datetime
    total: int  # in the window ending here
    severity: Severity


def crossings(
    occurrences: Sequence[Occurrence],
    window: timedelta,
    thresholds: Sequence[tuple[int, Severity]],
    after: datetime,
) -> Iterator[Crossing]:
    """The crossings after `after`, from occurrences in time order (those before `after` count towards
    the totals only). `thresholds`: (count, severity), the highest crossed at an occurrence wins."""
    total, first = 0, 0
    for occurrence in occurrences:
        total += occurrence.weight
        while occurrences[first].at < occurrence.at - window:
            total -= occurrences[first].weight
            first += 1
        if occurrence.at <= after:
            continue
        crossed = [severity for count, severity in thresholds if total >= count > total - occurrence.weight]
        if crossed:
            yield Crossing(occurrence.at, total, max(crossed, key=gravity))


def gravity(severity: Severity) -> int:
    """Severities in order: ignore < suspect < unhealthy."""
    return list(Severity).index(severity)
