"""NVML's clock-event (throttle) reasons as one 0/1 series per reason, which is what rules and panels
query; the bitmask itself is served only under DCGM's names, where dashboards expect it."""

from __future__ import annotations

from collections.abc import Sequence

from gpuscope.exporter.snapshot import GpuReading
from gpuscope.exporter.textformat import Family

# nvml.h: nvmlClocksEventReason* (the older nvmlClocksThrottleReason* have the same bits)
REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clocks_setting"),
)


def clock_event_family(readings: Sequence[GpuReading], gpu_labels: Sequence[str]) -> Family:
    family = Family(
        "gpuscope_gpu_clock_event_active",
        "gauge",
        "1 while NVML reports this clock-event (throttle) reason for the GPU, else 0",
    )
    for reading, labels in zip(readings, gpu_labels, strict=True):
        mask = reading.values.get("clock_event_reasons")
        if mask is None:
            continue
        bits = int(mask)
        for bit, reason in REASONS:
            family.add(labels[:-1] + f',reason="{reason}"}}', 1 if bits & bit else 0)
    return family
