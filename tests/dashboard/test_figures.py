"""Figures are pure functions of query results: gaps stay gaps, zoom survives refreshes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from gpuscope.collector.query import GpuRow, Heatmap, RackPower, Series
from gpuscope.dashboard.figures import Mark, heatmap_figure, rack_power_figure, series_figure
from gpuscope.dashboard.grid import JOB_HOVER_CELLS_MAX, MAX_CELLS, choose_level, to_grid, with_jobs

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def small_heatmap() -> Heatmap:
    rows = [GpuRow(i, "c", f"rack-{i // 2}", f"n{i // 2}", i % 2, f"GPU-{i}") for i in range(4)]
    values = np.array([[10.0, np.nan], [20.0, 30.0], [40.0, 50.0], [np.nan, np.nan]])
    return Heatmap("util_pct", 60, rows, [T0, T0 + timedelta(minutes=1)], values)


def test_heatmap_figure_keeps_gaps_and_scales_percent() -> None:
    figure = heatmap_figure(to_grid(small_heatmap(), "gpu"), revision="1h", marks=[Mark(1, "straggler")])
    trace = figure.data[0]
    # Plotted bottom-up so that the first rack is on top.
    assert list(trace.y) == ["rack-1/n1/gpu1", "rack-1/n1/gpu0", "rack-0/n0/gpu1", "rack-0/n0/gpu0"]
    assert np.isnan(trace.z[3][1]) and np.isnan(trace.z[0]).all(), "gaps stay gaps (NaN in the typed array)"
    assert trace.z.dtype == np.float32
    assert (trace.zmin, trace.zmax) == (0, 100)
    assert figure.layout.uirevision == "1h"
    line, box = figure.layout.shapes
    assert line.y0 == 1.5, "one line between the two racks"
    assert (box.y0, box.y1) == (1.5, 2.5) and figure.layout.annotations[0].y == 2, "row 1 is n0/gpu1"
    assert figure.layout.yaxis.autorange is None, "not 'reversed': Plotly rewrites it and refreshes lose the zoom"


def test_rows_are_averaged_per_node_and_rack_when_there_are_too_many() -> None:
    grid = to_grid(small_heatmap(), "node")
    assert [(r.label, r.gpus) for r in grid.rows] == [("rack-0/n0", 2), ("rack-1/n1", 2)]
    assert grid.values[0].tolist() == [15.0, 30.0], "a NaN-aware mean of the GPUs that reported"
    assert grid.values[1].tolist() == [40.0, 50.0], "a GPU with no samples does not pull the mean down"
    assert [r.label for r in to_grid(small_heatmap(), "rack").rows] == ["rack-0", "rack-1"]
    assert choose_level(1024, 128, 180) == "gpu"
    assert choose_level(8192, 1024, 180) == "node", "8,192 GPUs x 180 columns would be 1.5 M cells"
    assert choose_level(80000, 10000, 180) == "rack"
    assert choose_level(8192, 1024, 180, "gpu") == "node", "a level too fine for the budget is not honoured"
    assert choose_level(64, 8, 180, "rack") == "rack"
    assert 1024 * 180 <= MAX_CELLS < 8192 * 180


def test_rack_power_figure_in_kilowatts() -> None:
    data = RackPower(
        60, ["c/rack-0", "c/rack-1"], [T0, T0 + timedelta(minutes=1)], np.array([[5600.0, np.nan], [700.0, 1400.0]])
    )
    figure = rack_power_figure(data, revision="6h")
    assert [trace.name for trace in figure.data] == ["c/rack-0", "c/rack-1"]
    assert {trace.stackgroup for trace in figure.data} == {"stretch-0"}, "stacked: the top line is the cluster"
    assert list(figure.data[0].y) == [5.6, None]
    assert figure.layout.uirevision == "6h"


def _validated(figure: go.Figure) -> go.Figure:
    """The same figure with every property validated, as go.Figure builds it by default."""
    return go.Figure(figure.to_dict())


def test_figures_built_unvalidated_send_what_validated_ones_would() -> None:
    """figures.built() skips plotly's validation: the page must get the same JSON all the same."""
    times = [T0 + timedelta(minutes=m) for m in range(4)]
    power = RackPower(
        60, ["c/rack-0", "c/<b>1</b>"], times, np.array([[5600.0, np.nan, 1.0, 2.0], [700.0, 1400.0, np.nan, 3.0]])
    )
    rows = [GpuRow(i, "c", "rack-0", "n0", i, f"GPU-{i}") for i in range(2)]
    values = {m: np.array([[1.0, np.nan, 3.0, 4.0], [5.0, 6.0, 7.0, np.nan]]) for m in ("util_pct", "power_w")}
    series = Series(60, rows, times, values)
    jobs = np.array([["job a", "", "job a", "job a"], ["", "", "job <i>b</i>", ""]], dtype=object)
    for figure in (
        rack_power_figure(power, revision="6h"),
        rack_power_figure(RackPower(60, ["c/r"], times[:1], np.array([[5.0]])), revision="1h"),
        series_figure(series, ["util_pct", "power_w"], "r", {"power_w": 700.0}, jobs),
    ):
        assert json.loads(pio.to_json(figure)) == json.loads(pio.to_json(_validated(figure)))


def test_hovers_name_each_cells_job_as_plain_text_while_that_stays_small() -> None:
    asked: list[list[int]] = []

    def held(gpu_ids: list[int]) -> np.ndarray:
        asked.append(gpu_ids)
        jobs = np.full((len(gpu_ids), 2), "", dtype=object)
        jobs[0] = ["job train-7 (ada)", "job <b>x</b>"]  # a hostile job name stays text
        return jobs

    grid = with_jobs(to_grid(small_heatmap(), "gpu"), held)
    assert asked == [[0, 1, 2, 3]], "the store's GPU ids: node names repeat across clusters"
    trace = heatmap_figure(grid, revision="1h").data[0]
    assert "%{customdata}" in trace.hovertemplate and "°" not in trace.hovertemplate
    # Bottom-up like the rows: the first GPU's cells are the last row.
    assert list(trace.customdata[-1]) == ["job train-7 (ada)", "job &lt;b&gt;x&lt;/b&gt;"]
    assert list(trace.customdata[0]) == ["in no job", "in no job"]
    # Node rows hold several GPUs' jobs, and a large grid would grow by a string per cell: neither asks.
    assert with_jobs(to_grid(small_heatmap(), "node"), held).jobs is None
    columns = JOB_HOVER_CELLS_MAX // 4 + 1
    wide = Heatmap("util_pct", 60, small_heatmap().rows, [T0] * columns, np.zeros((4, columns)))
    assert with_jobs(to_grid(wide, "gpu"), held).jobs is None and len(asked) == 1
    assert "customdata" not in heatmap_figure(to_grid(small_heatmap(), "gpu"), revision="1h").data[0].hovertemplate


def test_a_racks_current_power_is_not_read_from_a_bucket_still_filling() -> None:
    """The newest bucket holds only the GPUs whose samples arrived: a rack at 9 kW must not read 3 kW."""
    from gpuscope.dashboard.data import rack_loads

    now = datetime.now(UTC)
    times = [now - timedelta(seconds=20), now - timedelta(seconds=10), now]
    power = RackPower(bucket_s=10, racks=["c/r1"], times=times, watts=np.array([[8800.0, 9000.0, 3000.0]]))
    (load,) = rack_loads(power, {"c/r1": 10.0}, {})
    assert load.current_kw == 9.0 and load.share == 0.9
