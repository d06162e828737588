"""NVML's clock-event (throttle) reasons: the bits of nvmlDeviceGetCurrentClocksEventReasons, with the
name the exporter serves each under (gpuscope_gpu_clock_event_active{reason=...}) and the words a page or
a health finding says. One table for the exporter, the health rules and the dashboard."""

from __future__ import annotations

from typing import NamedTuple


class ClockReason(NamedTuple):
    bit: int
    name: str  # the series' `reason` label
    words: str  # what an operator reads


# nvml.h: nvmlClocksEventReason* (the older nvmlClocksThrottleReason* have the same bits)
CLOCK_REASONS = (
    ClockReason(0x1, "gpu_idle", "GPU idle"),
    ClockReason(0x2, "applications_clocks_setting", "applications clocks"),
    ClockReason(0x4, "sw_power_cap", "SW power cap"),
    ClockReason(0x8, "hw_slowdown", "HW slowdown"),
    ClockReason(0x10, "sync_boost", "sync boost"),
    ClockReason(0x20, "sw_thermal_slowdown", "SW thermal slowdown"),
    ClockReason(0x40, "hw_thermal_slowdown", "HW thermal slowdown"),
    ClockReason(0x80, "hw_power_brake_slowdown", "HW power brake"),
    ClockReason(0x100, "display_clocks_setting", "display clocks"),
)


def reason_words(bits: int) -> list[str]:
    """The operator's words for each reason set in `bits`, in the table's order."""
    return [reason.words for reason in CLOCK_REASONS if bits & reason.bit]
