"""NVML's clock-event (throttle) reasons as one 0/1 series per reason, which is what rules and panels
query; the bitmask itself is served only under DCGM's names, where dashboards expect it."""

from __future__ import annotations

from collections.abc import Sequence

from gpuscope.core.clock_reasons import CLOCK_REASONS
from gpuscope.exporter.snapshot import GpuReading
from gpuscope.exporter.textformat import Family


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
        for bit, reason, _ in CLOCK_REASONS:
            family.add(labels[:-1] + f',reason="{reason}"}}', 1 if bits & bit else 0)
    return family
