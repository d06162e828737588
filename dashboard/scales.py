"""How each metric is shown: its title and unit, a fixed colour range that means something (70 °C is
normal, 90 °C is not; 500 and 535 W are the same load), and how rows of several GPUs (a node, a rack)
sum them up: the mean for activity and power, the worst GPU for temperature (the hottest) and clocks
(the slowest), so one failing GPU is not averaged away by seven healthy ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Worst = Literal["mean", "max", "min"]
GIB = 2**30

# Temperature: calm blues and greens up to ~70 °C, yellow from 75, red towards thermal slowdown (85-90).
THERMAL: list[list[float | str]] = [
    [0.0, "#313695"],
    [0.4, "#4575b4"],
    [0.67, "#74add1"],  # 70 °C
    [0.73, "#fee090"],  # 75 °C
    [0.87, "#f46d43"],  # 85 °C
    [1.0, "#a50026"],  # 95 °C
]


@dataclass(frozen=True)
class Scale:
    title: str  # with its unit, for axes and colour bars
    unit: str  # after a value in hovers
    zmin: float | None  # None: from the data
    zmax: float | None
    colorscale: str | list[list[float | str]] = "Viridis"
    rows: Worst = "mean"  # how a row of several GPUs sums them up
    factor: float = 1.0  # shown = stored x factor (bytes as GiB)
    digits: int = 1

    def per(self, level: str) -> str:
        if level == "gpu":
            return "GPU"
        how = {"mean": "mean of its GPUs", "max": "its hottest GPU", "min": "its slowest GPU"}[self.rows]
        return f"{level} ({how})"


SCALES: dict[str, Scale] = {
    "util_pct": Scale("GPU utilisation (%)", "%", 0, 100),
    "sm_active_pct": Scale("SM activity (%)", "%", 0, 100),
    "tensor_active_pct": Scale("Tensor activity (%)", "%", 0, 100),
    "temp_c": Scale("Temperature (°C)", "°C", 20, 95, THERMAL, rows="max", digits=0),
    "power_w": Scale("Power (W)", "W", 0, 1000, "Cividis", digits=0),
    "fb_used_bytes": Scale("Memory used (GiB)", "GiB", 0, None, "Blues", factor=1 / GIB),
    "sm_clock_mhz": Scale("SM clock (MHz)", "MHz", 0, 2100, "Cividis", rows="min", digits=0),
}


def scale_of(metric: str) -> Scale:
    """A metric's scale; one without (a newer metric) shows its key and the data's own range."""
    return SCALES.get(metric) or Scale(metric, "", None, None)
