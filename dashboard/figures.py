"""Pure functions from query results to Plotly figures (tests call them directly).

Every string a figure shows goes through `plain()` first. Plotly renders a subset of HTML in text,
hover text, tick labels, legend names, annotations and titles (`<a href>` is a link, `<b>` bold), and
fills `%{...}` in hover templates; names come from exporters, the scheduler and the URL, so a rack called
`<a href=...>` would otherwise be a link on the page. Plain text stays plain only through plain()."""

from __future__ import annotations

import bisect
import html
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from gpuscope.collector.query import NicSeries, RackPower, Series
from gpuscope.collector.query.arrays import nan_to_none
from gpuscope.collector.query.rack_power import NEAR_BUDGET
from gpuscope.dashboard.grid import Grid
from gpuscope.dashboard.node_colours import gpu_line
from gpuscope.dashboard.scales import SCALES, axis_range, scale_of

METRICS = {metric: scale.title for metric, scale in SCALES.items()}

# Every figure is drawn on the page's own background, light or dark: transparent, with grid lines that
# read on both. In the dark scheme gpuscope.css recolours axis text, so switching costs no redraw.
pio.templates["gpuscope"] = go.layout.Template(
    layout={
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "font": {"color": "#3d4350"},
        # Plotly picks the tool bar's colours against the paper, which is transparent here: its own.
        "modebar": {"bgcolor": "rgba(0,0,0,0)", "color": "#868e96", "activecolor": "#4c6ef5"},
        "xaxis": {"gridcolor": "rgba(128,128,128,0.25)", "zerolinecolor": "rgba(128,128,128,0.4)"},
        "yaxis": {"gridcolor": "rgba(128,128,128,0.25)", "zerolinecolor": "rgba(128,128,128,0.4)"},
    }
)
# Merged once, under a name of its own: a default named "plotly_white+gpuscope" is merged again for every
# figure built (~40 ms each, more than the overview's queries). Same template, same JSON.
pio.templates["gpuscope_white"] = pio.templates["plotly_white+gpuscope"]
pio.templates.default = "gpuscope_white"


def built(spec: dict[str, Any]) -> go.Figure:
    """A figure from one dict of plain trace and layout dicts, taken as it is: no property is validated
    (go.Figure's validation and copies cost ~1 ms a trace: 30 racks' power took 100 ms). The dicts are
    what the figure would validate to, so the JSON the page gets is the same; tests/dashboard/test_figures.py
    compares each against the validated figure. The default template is added as go.Figure adds it."""
    return go.Figure(spec, _validate=False)


def plain(text: object) -> str:
    """`text` as Plotly should show it, literally: & < > as the entities Plotly decodes for display (not
    &quot;, which it would show as such), and the brace of `%{` as one, so a hover template does not fill
    it. Labels that travel back in click data (heatmap rows) come back escaped: see `unplain()`."""
    return html.escape(str(text), quote=False).replace("%{", "%&#123;")


def unplain(text: str) -> str:
    """The name behind a label made by `plain()` (what a click on a figure reports)."""
    return html.unescape(text)


@dataclass(frozen=True)
class Mark:
    """A row to point out on a heatmap (a straggler), with what to say about it; with a start, only its
    cells from then to `end` (None: to the newest, while it lasts), else the whole row."""

    row: int
    text: str
    start: datetime | None = None
    end: datetime | None = None


def heatmap_figure(grid: Grid, revision: str, marks: Sequence[Mark] = (), height: int | None = None) -> go.Figure:
    """Rows (GPUs, nodes or racks, grouped by rack) on y, time buckets on x. Row labels name the node
    and GPU ('rack/node/gpuN'), which is what a click reports (pages/heatmap.py maps it back)."""
    if not grid.rows:
        return message_figure("No data yet: no GPU reported in this range.")
    # Plotted bottom-up, so the first rack comes out on top. Not autorange "reversed": Plotly rewrites
    # that value internally, so each refresh looked like a new figure and reset the user's zoom.
    labels = [plain(row.label) for row in reversed(grid.rows)]
    top = len(labels) - 1
    scale = scale_of(grid.metric)
    title = plain(scale.title)
    per = scale.per(grid.level)
    shapes: list[dict[str, Any]] = [
        {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": top - b + 0.5, "y1": top - b + 0.5,
         "line": {"color": "white", "width": 1}}
        for b in _rack_boundaries(grid)
    ]  # fmt: skip
    annotations = []
    for mark in marks:
        y, span = top - mark.row, _mark_span(grid, mark)
        if span is None:
            continue  # over before the first cell shown
        shapes.append({"type": "rect", **span, "y0": y - 0.5, "y1": y + 0.5,
                       "line": {"color": "#d32f2f", "width": 3}, "fillcolor": "rgba(0,0,0,0)"})  # fmt: skip
        annotations.append({**_mark_label(grid, span), "y": y, "text": plain(mark.text),
                            "showarrow": False, "font": {"color": "white"}, "bgcolor": "#d32f2f"})  # fmt: skip
    heatmap = {
        "type": "heatmap",
        # float32 numpy goes out as a base64 typed array (NaN: a gap), not a list of Python floats:
        # for 1,024 GPUs x 120 buckets that is ~6x faster to encode and a third of the bytes.
        "z": np.ascontiguousarray(grid.values[::-1] * scale.factor, dtype=np.float32),
        "x": grid.times,
        "y": labels,
        # A fixed range per metric: colours mean the same thing on every page and every refresh.
        "zmin": scale.zmin,
        "zmax": scale.zmax,
        "colorscale": scale.colorscale,
        "colorbar": {"title": {"text": title}},
        "hovertemplate": f"%{{y}}<br>%{{x}}<br>%{{z:.{scale.digits}f}} {plain(scale.unit)}"
        + ("<br>%{customdata}" if grid.jobs is not None else "")
        + "<extra></extra>",
        "customdata": None if grid.jobs is None else job_words(grid.jobs[::-1]),
    }
    layout = {
        "title": {"text": f"{title} per {per}, {grid.bucket_s} s buckets"},
        "yaxis": {"showticklabels": len(labels) <= 128, "title": None},
        "xaxis": {"title": None},
        "height": height or max(360, min(1100, 60 + 7 * len(labels))),
        "margin": {"l": 170, "r": 20, "t": 50, "b": 40},
        "uirevision": revision,  # zoom and pan survive refreshes until the view changes
        "shapes": shapes,
        "annotations": annotations,
    }
    # One dict, validated once: add_hline/add_shape per rack cost ~10 ms each.
    return go.Figure({"data": [{k: v for k, v in heatmap.items() if v is not None}], "layout": layout})


# Each stretch of buckets with readings is its own stack: Plotly draws a stacked trace's missing points as
# zero, and hours with no data must be a gap, never a cluster at 0 kW. Each rack's traces share a legend
# entry and a colour; past this many stretches the shortest gaps are closed (the line joins across them).
POWER_STRETCHES_MAX = 8
POWER_TRACES_MAX = 400


def rack_power_figure(data: RackPower, revision: str) -> go.Figure:
    """Power per rack over time, stacked: the top line is the whole cluster; no data is a gap."""
    if not data.racks:
        return message_figure("No power readings in this range yet.")
    kw = data.watts / 1000.0
    palette = pio.templates["plotly"].layout.colorway
    reported = np.asarray(~np.isnan(kw).all(axis=0))
    stretches = reported_stretches(reported, max(1, min(POWER_STRETCHES_MAX, POWER_TRACES_MAX // len(data.racks))))
    traces = [
        {
            "type": "scatter",
            "x": [data.times[j] for j in columns],
            "y": nan_to_none(watts[columns]),
            "name": plain(rack),
            "legendgroup": f"rack-{i}",
            "showlegend": k == 0,
            "line": {"color": palette[i % len(palette)]},
            "mode": "lines" if len(columns) > 1 else "lines+markers",  # a lone bucket is a dot
            "stackgroup": f"stretch-{k}",
            "customdata": [plain(rack)] * len(columns),  # the rack a click opens (never drawn, yet plain)
            "hovertemplate": "%{fullData.name}<br>%{x}<br>%{y:.1f} kW<extra></extra>",  # the name, escaped
        }
        for k, columns in enumerate(stretches)
        for i, (rack, watts) in enumerate(zip(data.racks, kw, strict=True))
    ]
    layout: dict[str, Any] = {
        "title": {"text": f"Power per rack (kW, stacked), {data.bucket_s} s buckets"},
        "yaxis": {"title": {"text": "kW"}, "rangemode": "tozero"},
        "height": 380,
        "margin": {"l": 60, "r": 20, "t": 50, "b": 40},
        "uirevision": revision,
    }
    if data.times:
        layout["xaxis"] = {"range": [data.times[0], data.times[-1]]}
    return built({"data": traces, "layout": layout})


def reported_stretches(reported: np.ndarray, most: int) -> list[np.ndarray]:
    """The columns with a reading, cut at the `most - 1` longest runs of columns without one."""
    columns = np.flatnonzero(reported)
    if columns.size == 0:
        return []
    gaps = np.diff(columns) - 1  # empty columns between neighbours
    cuts = np.flatnonzero(gaps > 0)
    if cuts.size > most - 1:
        cuts = np.sort(cuts[np.argsort(-gaps[cuts], kind="stable")[: most - 1]])
    return np.split(columns, cuts + 1)


def budget_figure(racks: list[str], current_kw: list[float | None], budget_kw: list[float | None]) -> go.Figure:
    """Each rack's latest draw against its budget; over budget in red."""
    if not racks:
        return message_figure("No racks have reported power yet.")
    colours = [
        "#d32f2f"
        if (c is not None and b and c > b)
        else "#f9a825"
        if (c is not None and b and c >= NEAR_BUDGET * b)
        else "#1976d2"
        for c, b in zip(current_kw, budget_kw, strict=True)
    ]
    figure = go.Figure(
        [
            go.Bar(
                x=[plain(rack) for rack in racks],
                y=current_kw,
                name="now",
                marker_color=colours,
                customdata=[plain(rack) for rack in racks],  # the rack a click opens (never drawn, yet plain)
                hovertemplate="%{x}<br>%{y:.1f} kW now<extra></extra>",
            ),
            go.Scatter(
                x=[plain(rack) for rack in racks],
                y=budget_kw,
                name="budget",
                mode="markers",
                marker={"symbol": "line-ew-open", "size": 40, "line": {"width": 3, "color": "#8d6e63"}},
                hovertemplate="%{x}<br>budget %{y:.1f} kW<extra></extra>",
            ),
        ]
    )
    figure.update_layout(
        title="Current draw against each rack's budget (kW)",
        yaxis={"title": "kW", "rangemode": "tozero"},
        height=340,
        margin={"l": 60, "r": 20, "t": 50, "b": 60},
        uirevision="budget",
    )
    return figure


def series_figure(
    data: Series,
    metrics: Sequence[str],
    revision: str,
    tops: dict[str, float | None] | None = None,
    jobs: np.ndarray | None = None,
) -> go.Figure:
    """Small multiples: one panel per metric (stacked, sharing the time axis), one line per GPU, each
    value axis on its metric's scale (`tops`: a metric's ceiling in stored units, e.g. memory size);
    `jobs` (rows, times): who held each GPU, named in the hover.
    Built as one dict: make_subplots and a validated add_trace per line cost more than the query."""
    if not data.rows:
        return message_figure("This node has no GPUs in the inventory.")
    panels, gap = len(metrics), 0.03
    traces: list[dict[str, Any]] = []
    layout: dict[str, Any] = {
        "height": 170 * panels + 60,
        "margin": {"l": 60, "r": 20, "t": 40, "b": 30},
        "uirevision": revision,
        "annotations": [],
        "xaxis": {"anchor": f"y{panels}"},
    }
    for panel, metric in enumerate(metrics, start=1):
        axis = "y" if panel == 1 else f"y{panel}"
        low, high = 1 - panel / panels + gap / 2, 1 - (panel - 1) / panels - gap / 2
        scale = scale_of(metric)
        top = (tops or {}).get(metric)
        shown = data.values[metric] * scale.factor
        yaxis: dict[str, Any] = {"domain": [max(low, 0), min(high, 1)], "anchor": "x"}
        value_range = axis_range(scale, shown, None if top is None else top * scale.factor)
        if value_range is not None:
            yaxis["range"] = value_range
        layout["yaxis" if panel == 1 else f"yaxis{panel}"] = yaxis
        layout["annotations"].append({"text": plain(scale.title), "xref": "paper", "yref": "paper",
                                      "x": 0.5, "y": high, "yanchor": "bottom", "showarrow": False})  # fmt: skip
        hover = f"%{{x}}<br>%{{y:.{scale.digits}f}} {plain(scale.unit)}<extra></extra>"
        for i, (row, values) in enumerate(zip(data.rows, shown, strict=True)):
            name = f"gpu{row.gpu_index}"
            trace = {"type": "scatter", "mode": "lines", "x": data.times,
                     "y": values.astype(np.float32), "xaxis": "x", "yaxis": axis,
                     "name": name, "legendgroup": name, "showlegend": panel == 1,
                     "line": gpu_line(row.gpu_index),  # its colour on every panel, not the trace order's
                     "hovertemplate": f"{name}<br>{hover}"}  # fmt: skip
            if jobs is not None:
                trace["customdata"] = job_words(jobs[i])
                trace["hovertemplate"] = f"{name}<br>{hover}".replace("<extra>", "<br>%{customdata}<extra>")
            traces.append(trace)
    return built({"data": traces, "layout": layout})


# InfiniBand port metrics as an operator reads them: what each counter's rate is, in its unit.
NIC_TITLES = {
    "xmit_bytes": "transmitted",
    "rcv_bytes": "received",
    "xmit_packets": "packets transmitted",
    "rcv_packets": "packets received",
    "xmit_wait": "transmit wait (congestion)",
    "symbol_errors": "symbol errors",
    "link_downed": "link down events",
    "rcv_errors": "receive errors",
    "link_error_recovery": "link error recoveries",
    "xmit_discards": "transmit discards",
    "state": "link state (4: active)",
    "phys_state": "physical state (5: link up)",
    "rate_gbps": "link rate",
}


def nic_figure(data: NicSeries, revision: str) -> go.Figure:
    if not data.ports:
        return message_figure("No InfiniBand ports on this node.")
    if data.metric.endswith("bytes"):
        scale, unit = 8 / 1e9, "Gbit/s"
    elif data.metric == "rate_gbps":
        scale, unit = 1.0, "Gbit/s"
    elif data.metric == "xmit_wait":
        scale, unit = 1.0, "ticks/s"
    else:
        scale, unit = 1.0, ("per s" if data.per_second else "")
    digits = 2 if unit == "Gbit/s" else 1
    figure = go.Figure(
        [
            go.Scatter(
                x=data.times,
                y=nan_to_none(values * scale),
                name=plain(port.label),
                mode="lines",
                hovertemplate=f"{plain(port.label)}<br>%{{x}}<br>%{{y:.{digits}f}} {unit}<extra></extra>",
            )
            for port, values in zip(data.ports, data.values, strict=True)
        ]
    )
    what = NIC_TITLES.get(data.metric, data.metric.replace("_", " "))
    figure.update_layout(
        title=plain(f"InfiniBand {what}" + (f" ({unit})" if unit else "")),
        # From zero: a port at 44 of its 400 Gbit/s is not "down to nothing" when it eases from 52.
        yaxis={"title": {"text": unit}, "rangemode": "tozero"} if unit else {"rangemode": "tozero"},
        height=300,
        margin={"l": 60, "r": 20, "t": 50, "b": 30},
        uirevision=revision,
    )
    return figure


def job_words(held: np.ndarray) -> list[Any]:
    """Hover text for cells' holders (held_by's labels), plain, nested as `held` is."""
    if held.ndim > 1:
        return [job_words(row) for row in held]
    return [plain(label) if label else "in no job" for label in held]


def message_figure(text: str) -> go.Figure:
    """An empty chart that says why it is empty (rather than blank axes). `text` is plain text: it may
    quote a name from the URL."""
    figure = go.Figure()
    figure.update_layout(
        xaxis={"visible": False},
        yaxis={"visible": False},
        height=220,
        annotations=[
            {
                "text": plain(text),
                "showarrow": False,
                "font": {"size": 16, "color": "#868e96"},
                "xref": "paper",
                "yref": "paper",
                "x": 0.5,
                "y": 0.5,
            }
        ],
    )
    return figure


def _mark_span(grid: Grid, mark: Mark) -> dict[str, Any] | None:
    """The x extent of a mark's box: the whole row, or edge to edge of the cells from its start's to its
    end's (a heatmap cell is drawn centred on its bucket's start); None: it ended before the first cell."""
    if mark.start is None or not grid.times:
        return {"xref": "paper", "x0": 0, "x1": 1}
    half = timedelta(seconds=grid.bucket_s / 2)
    if mark.end is not None and mark.end < grid.times[0]:
        return None

    def cell(t: datetime) -> datetime:  # the bucket holding t, clamped to the cells shown
        return grid.times[min(max(bisect.bisect_right(grid.times, t) - 1, 0), len(grid.times) - 1)]

    last = grid.times[-1] if mark.end is None else cell(mark.end)
    return {"xref": "x", "x0": cell(mark.start) - half, "x1": last + half}


def _mark_label(grid: Grid, span: dict[str, Any]) -> dict[str, Any]:
    """Where a mark's words go: inside its box, at the end that leaves them room."""
    if span["xref"] == "paper":
        return {"xref": "paper", "x": 1, "xanchor": "right"}
    middle = grid.times[0] + (grid.times[-1] - grid.times[0]) / 2
    if span["x1"] > middle:
        return {"xref": "x", "x": span["x1"], "xanchor": "right"}
    return {"xref": "x", "x": span["x0"], "xanchor": "left"}


def _rack_boundaries(grid: Grid) -> list[int]:
    return [i for i in range(1, len(grid.rows)) if grid.rows[i].rack != grid.rows[i - 1].rack]
