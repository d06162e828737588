"""A window rule's findings on GPUs: each GPU's crossings (health/rules/crossing.py) as Evidence, in words."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta

from gpuscope.health.model import Evidence, Severity
from gpuscope.health.rules.crossing import Crossing, Occurrence, crossings
from gpuscope.health.rules.places import GpuPlace


def gpu_crossings(
    history: Mapping[int, Sequence[Occurrence]],
    places: Mapping[int, GpuPlace],
    window: timedelta,
    thresholds: Sequence[tuple[int, Severity]],
    since: datetime,
    kind: str,
    action: str,
    words: Callable[[int, GpuPlace, Crossing], str],
) -> list[Evidence]:
    """`history`: GPU id -> its occurrences in time order; `words(gpu_id, place, crossing)` the detail."""
    found = []
    for gpu_id, occurrences in history.items():
        place = places.get(gpu_id)
        if place is None:  # not in the inventory: nothing to name it by
            continue
        for crossing in crossings(occurrences, window, thresholds, since):
            found.append(
                Evidence(
                    at=crossing.at,
                    node_id=place.node_id,
                    gpu_id=gpu_id,
                    kind=kind,
                    severity=crossing.severity,
                    detail=words(gpu_id, place, crossing),
                    action=action,
                    gpu_index=place.gpu_index,
                )
            )
    return found
