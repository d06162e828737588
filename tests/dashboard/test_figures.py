"""Figures are pure functions of query results: gaps stay gaps, zoom survives refreshes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from collector.query import GpuRow, Heatmap, RackPower
from dashboard.figures import heatmap_figure, rack_power_figure

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def small_heatmap() -> Heatmap:
    rows = [GpuRow(i, "c", f"rack-{i // 2}", f"n{i // 2}", i % 2, f"GPU-{i}") for i in range(4)]
    values = np.array([[10.0, np.nan], [20.0, 30.0], [40.0, 50.0], [np.nan, np.nan]])
    return Heatmap("util_pct", 60, rows, [T0, T0 + timedelta(minutes=1)], values)


def test_heatmap_figure_keeps_gaps_and_scales_percent() -> None:
    figure = heatmap_figure(small_heatmap(), revision="1h")
    trace = figure.data[0]
    assert list(trace.y) == ["rack-0/n0/gpu0", "rack-0/n0/gpu1", "rack-1/n1/gpu0", "rack-1/n1/gpu1"]
    assert trace.z[0][1] is None and list(trace.z[3]) == [None, None]
    assert (trace.zmin, trace.zmax) == (0, 100)
    assert figure.layout.uirevision == "1h"
    assert [shape.y0 for shape in figure.layout.shapes] == [1.5], "one line between the two racks"


def test_rack_power_figure_in_kilowatts() -> None:
    data = RackPower(
        60, ["c/rack-0", "c/rack-1"], [T0, T0 + timedelta(minutes=1)], np.array([[5600.0, np.nan], [700.0, 1400.0]])
    )
    figure = rack_power_figure(data, revision="6h")
    assert [trace.name for trace in figure.data] == ["c/rack-0", "c/rack-1"]
    assert list(figure.data[0].y) == [5.6, None]
    assert figure.layout.uirevision == "6h"
