"""Thermal slowdown at normal load: a GPU that slows for heat while not at its power cap, again and again.

What: gpu_sample.clock_event_reasons with a slowdown bit (NVML's clocksEventReasons: HW slowdown 0x8,
SW thermal 0x20, HW thermal 0x40, HW power brake 0x80) while power_w is under 90% of power_limit_w, so
the cap (its own bit, 0x4, not counted) does not explain it. Threshold: 90 such samples in the trailing
30 minutes (half of them at 10 s), suspect. Why: one hot moment is weather; half an hour of it at normal
load is cooling (a failed fan, blocked airflow, a heatsink off its die) and the GPU runs slow in every
job it gets. Action check_cooling. Samples without power or limit are not judged. AMD GPUs report no
clock-event reasons to gpuscope, so the rule does not apply to them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from gpuscope.core.clock_reasons import CLOCK_REASONS
from gpuscope.health.model import Evidence, Severity
from gpuscope.health.rules.config import EvidenceConfig
from gpuscope.health.rules.crossing import Crossing, Occurrence
from gpuscope.health.rules.gpu_crossings import gpu_crossings
from gpuscope.health.rules.gpu_steps import GpuStep
from gpuscope.health.rules.places import GpuPlace

KIND = "thermal_slowdown"
ACTION = "check_cooling"

_SLOWED = (
    "SELECT gpu_id, ts, clock_event_reasons FROM gpu_sample"
    " WHERE gpu_id = ANY(%(gpus)s) AND up AND ts > %(scan_from)s AND ts <= %(until)s"
    "   AND clock_event_reasons & %(reasons)s <> 0 AND power_w < %(fraction)s * power_limit_w"
    " ORDER BY gpu_id, ts"
)


async def thermal_evidence(
    conn: AsyncConnection[Any],
    steps: Sequence[GpuStep],
    places: dict[int, GpuPlace],
    since: datetime,
    until: datetime,
    config: EvidenceConfig,
) -> list[Evidence]:
    slowed = sorted({s.gpu_id for s in steps if s.slowed})
    if not slowed:
        return []
    cur = await conn.execute(
        _SLOWED,
        {
            "gpus": slowed,
            "scan_from": since - config.thermal_window,
            "until": until,
            "reasons": config.thermal_reasons,
            "fraction": config.thermal_power_fraction,
        },
    )
    history: dict[int, list[Occurrence]] = defaultdict(list)
    reasons_seen: dict[int, int] = defaultdict(int)
    for gpu_id, at, reasons in await cur.fetchall():
        history[gpu_id].append(Occurrence(at, 1))
        reasons_seen[gpu_id] |= reasons & config.thermal_reasons
    thresholds = [(config.thermal_samples, Severity.SUSPECT)]
    minutes = config.thermal_window.total_seconds() / 60

    def words(gpu_id: int, place: GpuPlace, crossing: Crossing) -> str:
        return (
            f"GPU {place.gpu_index} slowed ({reason_names(reasons_seen[gpu_id])}) in {crossing.total} samples"
            f" of {minutes:g} min while under {config.thermal_power_fraction:.0%} of its power limit"
        )

    return gpu_crossings(history, places, config.thermal_window, thresholds, since, KIND, ACTION, words)


def reason_names(bits: int) -> str:
    return ", ".join(reason.name.replace("_", " ") for reason in CLOCK_REASONS if bits & reason.bit)
