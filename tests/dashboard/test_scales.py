"""Each metric keeps one meaningful colour range and its unit, whatever the data: 70 °C is drawn in calm
colours and 90 °C in alarming ones; 500 and 535 W look alike; memory is in GiB; and a node's row shows
its worst GPU where that is what matters (the hottest, the slowest clock), not a mean that hides it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from gpuscope.collector.query import GpuRow, Heatmap, NicSeries, PortRow, Series
from gpuscope.dashboard.figures import heatmap_figure, nic_figure, series_figure
from gpuscope.dashboard.grid import to_grid
from gpuscope.dashboard.scales import GIB, SCALES, THERMAL, axis_range

T0 = datetime(2026, 11, 1, tzinfo=UTC)
ROWS = [GpuRow(i, "c", "rack-0", "n0", i, f"GPU-{i}") for i in range(8)]
TIMES = [T0 + timedelta(minutes=m) for m in range(2)]


def node_of(metric: str, per_gpu: list[float]) -> np.ndarray:
    values = np.array([[v, v] for v in per_gpu])
    return to_grid(Heatmap(metric, 60, ROWS, TIMES, values), "node").values[0]


def colour_at(celsius: float) -> str:
    """The colour-scale stop at or below this temperature on the fixed 20-95 °C range."""
    position = (celsius - 20) / (95 - 20)
    return str(max((stop for stop in THERMAL if float(stop[0]) <= position), key=lambda stop: float(stop[0]))[1])


def test_one_hot_gpu_shows_on_its_node_and_one_slow_clock_too() -> None:
    assert node_of("temp_c", [60] * 7 + [92]).tolist() == [92, 92], "the hottest GPU, not a mean of 64"
    assert node_of("sm_clock_mhz", [1980] * 7 + [1100]).tolist() == [1100, 1100], "the slowest clock"
    assert node_of("util_pct", [100] * 7 + [20]).tolist() == [90, 90], "activity: the mean"
    gaps = np.array([[np.nan, 50.0]] * 8)
    grid = to_grid(Heatmap("temp_c", 60, ROWS, TIMES, gaps), "node")
    assert np.isnan(grid.values[0][0]) and grid.values[0][1] == 50, "a bucket nobody reported stays a gap"
    assert "hottest" in SCALES["temp_c"].per("node")


@pytest.mark.parametrize(
    ("metric", "values", "expected"),
    [("temp_c", [68, 72], (20, 95)), ("power_w", [500, 535], (0, 1000)), ("util_pct", [98, 99], (0, 100))],
)
def test_ranges_are_fixed_whatever_the_data(metric: str, values: list[float], expected: tuple[float, float]) -> None:
    heatmap = Heatmap(metric, 60, ROWS[:2], TIMES, np.array([[v, v] for v in values]))
    trace = heatmap_figure(to_grid(heatmap, "gpu"), "r").data[0]
    assert (trace.zmin, trace.zmax) == expected
    assert SCALES[metric].unit in trace.hovertemplate


def test_normal_temperatures_are_calm_and_slowdown_is_not() -> None:
    assert colour_at(70) in ("#4575b4", "#74add1"), "70 °C: a normal loaded GPU, in blues"
    assert colour_at(90) in ("#f46d43", "#a50026"), "90 °C: near thermal slowdown, in reds"


def test_memory_is_shown_in_gib_with_its_unit() -> None:
    heatmap = Heatmap("fb_used_bytes", 60, ROWS[:1], TIMES, np.array([[60 * GIB, 75 * GIB]]))
    trace = heatmap_figure(to_grid(heatmap, "gpu"), "r").data[0]
    assert trace.z[0].tolist() == [60, 75] and "GiB" in trace.hovertemplate
    assert "(GiB)" in trace.colorbar.title.text
    series = Series(60, ROWS[:1], TIMES, {"fb_used_bytes": np.array([[60 * GIB, 75 * GIB]])})
    figure = series_figure(series, ["fb_used_bytes"], "r")
    assert list(figure.data[0].y) == [60, 75] and "GiB" in figure.data[0].hovertemplate
    assert figure.layout.annotations[0].text == "Memory used (GiB)"


def test_infiniband_charts_say_what_they_show_in_its_unit() -> None:
    port = PortRow(1, "c", "rack-0", "n0", "mlx5_0", 1)
    rates = NicSeries("xmit_bytes", True, 60, [port], TIMES, np.array([[50e9 / 8, 50e9 / 8]]))
    figure = nic_figure(rates, "r")
    assert figure.layout.title.text == "InfiniBand transmitted (Gbit/s)", "not 'xmit bytes (Gbit/s)'"
    assert list(figure.data[0].y) == [50.0, 50.0] and "Gbit/s" in figure.data[0].hovertemplate
    state = nic_figure(NicSeries("state", False, 60, [port], TIMES, np.array([[4.0, 4.0]])), "r")
    assert "/s" not in state.layout.title.text, "a gauge is not a rate"


def test_line_charts_keep_each_metrics_own_axis() -> None:
    """A 97-100% wiggle on a 0-100 axis reads as flat full load, not as a swing; 500-535 W from zero reads
    as steady power; 65 GiB of an 80-GB card reads as most of it. Data outside a fixed range stretches it."""
    wiggle = np.array([[97.0, 100.0, np.nan, 98.5]])
    assert axis_range(SCALES["util_pct"], wiggle) == [0, 100]
    assert axis_range(SCALES["temp_c"], np.array([[70.0, 71.0]])) == [20, 95]
    assert axis_range(SCALES["temp_c"], np.array([[70.0, 101.0]])) == [20, 101.0]
    power = axis_range(SCALES["power_w"], np.array([[500.0, 535.0]]))
    assert power is not None and power[0] == 0 and 535 < power[1] < 600
    memory = SCALES["fb_used_bytes"]
    assert axis_range(memory, np.array([[65.0]]), top=80.0) == [0, 84.0]
    assert axis_range(memory, np.array([[np.nan]])) is None  # nothing to draw: Plotly's own axis
    assert axis_range(SCALES["sm_clock_mhz"], np.array([[np.nan]])) == [0, 2100]
