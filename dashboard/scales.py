"""How each metric is shown: its title and unit, a fixed colour range that means something (70 °C is
normal, 90 °C is not; 500 and 535 W are the same load), and how rows of several GPUs (a node, a rack)
sum them up: the mean for activity and power, the worst GPU for temperature (the hottest) and clocks
(the slowest), so one failing GPU is not averaged away by seven healthy ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

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
    # A line chart's value axis: "fixed" spans zmin..zmax (stretched only to fit what is outside), so a
    # 97-100% wiggle reads as flat full load; "zero" starts at 0 and ends at the data's top or the GPU's
    # own limit (power differs by model, memory by card).
    axis: Literal["fixed", "zero"] = "fixed"

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
    "power_w": Scale("Power (W)", "W", 0, 1000, "Cividis", digits=0, axis="zero"),
    "fb_used_bytes": Scale("Memory used (GiB)", "GiB", 0, None, "Blues", factor=1 / GIB, axis="zero"),
    "sm_clock_mhz": Scale("SM clock (MHz)", "MHz", 0, 2100, "Cividis", rows="min", digits=0),
}


def axis_range(scale: Scale, shown: np.ndarray, top: float | None = None) -> list[float] | None:
    """The value axis of a line chart of `shown` (values in the scale's unit, NaN: no data); `top`: the
    device's own ceiling in that unit (its memory). None: Plotly's autorange (a scale without a range)."""
    seen = shown[np.isfinite(shown)]
    low, high = (float(seen.min()), float(seen.max())) if seen.size else (None, None)
    if scale.axis == "zero":
        ceiling = max(top or 0.0, high or 0.0)
        return [0.0, ceiling * 1.05] if ceiling > 0 else None
    if scale.zmin is None or scale.zmax is None:
        return None
    return [
        min(scale.zmin, low if low is not None else scale.zmin),
        max(scale.zmax, high if high is not None else scale.zmax),
    ]


def scale_of(metric: str) -> Scale:
    """A metric's scale; one without (a newer metric) shows its key and the data's own range."""
    return SCALES.get(metric) or Scale(metric, "", None, None)
