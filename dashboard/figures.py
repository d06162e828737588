"""Pure functions from query results to Plotly figures (tests call them directly)."""

from __future__ import annotations

import plotly.graph_objects as go

from collector.query import Heatmap, RackPower
from collector.query.arrays import nan_to_none

METRIC_TITLES = {"util_pct": "GPU utilisation (%)", "power_w": "Power (W)", "temp_c": "Temperature (°C)"}


def heatmap_figure(data: Heatmap, revision: str) -> go.Figure:
    """GPUs on y grouped by rack and node (top to bottom), time buckets on x."""
    labels = [row.label for row in data.rows]
    percent = data.metric.endswith("_pct")
    figure = go.Figure(
        go.Heatmap(
            z=nan_to_none(data.values),
            x=data.times,
            y=labels,
            zmin=0 if percent else None,
            zmax=100 if percent else None,
            colorscale="Viridis",
            colorbar={"title": {"text": METRIC_TITLES.get(data.metric, data.metric)}},
            hovertemplate="%{y}<br>%{x}<br>%{z:.1f}<extra></extra>",
        )
    )
    figure.update_layout(
        title=f"{METRIC_TITLES.get(data.metric, data.metric)} per GPU, {data.bucket_s} s buckets",
        yaxis={"autorange": "reversed", "showticklabels": len(labels) <= 128, "title": "rack / node / GPU"},
        xaxis={"title": None},
        height=max(360, min(1200, 40 + 6 * len(labels))),
        margin={"l": 160, "r": 20, "t": 50, "b": 40},
        uirevision=revision,  # the user's zoom survives refreshes until the range changes
    )
    for boundary in _rack_boundaries(data):
        figure.add_hline(y=boundary - 0.5, line={"color": "white", "width": 1})
    return figure


def rack_power_figure(data: RackPower, revision: str) -> go.Figure:
    figure = go.Figure(
        [
            go.Scatter(
                x=data.times,
                y=nan_to_none(watts / 1000.0),
                name=rack,
                mode="lines",
                hovertemplate=f"{rack}<br>%{{x}}<br>%{{y:.1f}} kW<extra></extra>",
            )
            for rack, watts in zip(data.racks, data.watts, strict=True)
        ]
    )
    figure.update_layout(
        title=f"Power per rack (kW), {data.bucket_s} s buckets",
        yaxis={"title": "kW", "rangemode": "tozero"},
        height=360,
        margin={"l": 60, "r": 20, "t": 50, "b": 40},
        uirevision=revision,
    )
    return figure


def _rack_boundaries(data: Heatmap) -> list[int]:
    return [i for i in range(1, len(data.rows)) if data.rows[i].rack != data.rows[i - 1].rack]
