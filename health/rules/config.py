"""The thresholds and windows of the evidence rules, with why each default is what it is."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

# NVML clock-event reasons (nvml.h nvmlClocksEventReason*, exporter/clock_events.py) that slow a GPU
# for heat or an external brake rather than its own power cap (0x4, SW power cap, is left out).
HW_SLOWDOWN, SW_THERMAL, HW_THERMAL, HW_POWER_BRAKE = 0x8, 0x20, 0x40, 0x80


@dataclass(frozen=True)
class EvidenceConfig:
    """The evidence rules' thresholds and windows (health/rules/); each default's reason is beside it."""

    # How far before a window's first sample its predecessor is looked for, so that a change at the first
    # sample counts (the node page's reads use the same, collector/query/counters.py). A device silent
    # for longer starts afresh: its first sample has nothing to compare with.
    look_back: timedelta = timedelta(minutes=10)

    # NVLink: a recovery is the link retraining (traffic stops meanwhile); DCGM's health watch fails a
    # GPU on a single NVLink replay or recovery error (dcgm hardware limits: DCGM_LIMIT_MAX_NVLINK_ERROR
    # 1), and counts CRC errors only at 100 or more per second (the driver team's figure, same file).
    # One recovery or burst: suspect; three in an hour is a link that keeps failing: unhealthy.
    nvlink_window: timedelta = timedelta(hours=1)
    nvlink_suspect: int = 1
    nvlink_unhealthy: int = 3
    nvlink_crc_burst_per_s: float = 100.0

    # InfiniBand: Azure's node health checks fail a node on any link flap in 6 hours; one down can also be
    # a switch reboot or a cable reseated in maintenance, and a drain costs jobs, so one is not enough:
    # two flaps of a port in 6 hours: suspect; five: unhealthy. A flap is a rise of link_downed or the
    # port leaving ACTIVE (the larger of the two per sample: they see the same down), or a rise of
    # link_error_recovery (the link recovered from errors without going down).
    ib_window: timedelta = timedelta(hours=6)
    ib_suspect: int = 2
    ib_unhealthy: int = 5

    # Thermal: slowdown bits in half the samples of 30 minutes (90 at 10 s) while drawing under 90% of
    # the power limit, i.e. not at its cap: a GPU that runs hot at normal load, a cooling fault.
    thermal_window: timedelta = timedelta(minutes=30)
    thermal_samples: int = 90
    thermal_power_fraction: float = 0.9
    thermal_reasons: int = HW_SLOWDOWN | SW_THERMAL | HW_THERMAL | HW_POWER_BRAKE

    # Stragglers: the same GPU the culprit in two different jobs within a week is the GPU, not the jobs.
    straggler_window: timedelta = timedelta(days=7)
    straggler_jobs: int = 2
