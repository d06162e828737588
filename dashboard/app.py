"""Builds the Dash app: the cluster overview page, refreshed every few seconds."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from dash import Dash, Input, Output, dcc, html
from psycopg_pool import ConnectionPool

from dashboard.data import RANGES_S, load_overview
from dashboard.figures import heatmap_figure, rack_power_figure

REFRESH_MS = 5000


def create_app(pool: ConnectionPool[Any]) -> Dash:
    app = Dash(__name__, title="gpuscope", update_title="")
    app.layout = html.Div(
        [
            html.H2("gpuscope: cluster overview"),
            html.Div(id="fleet-summary", className="summary"),
            dcc.RadioItems(
                id="range",
                options=[{"label": key, "value": key} for key in RANGES_S],
                value="1h",
                inline=True,
            ),
            dcc.Graph(id="util-heatmap", config={"displaylogo": False}),
            dcc.Graph(id="rack-power", config={"displaylogo": False}),
            dcc.Interval(id="refresh", interval=REFRESH_MS),
        ],
        style={"fontFamily": "system-ui, sans-serif", "margin": "0 1.5em"},
    )

    @app.callback(
        Output("fleet-summary", "children"),
        Output("util-heatmap", "figure"),
        Output("rack-power", "figure"),
        Input("refresh", "n_intervals"),
        Input("range", "value"),
    )
    def refresh(_: int | None, range_key: str) -> tuple[list[Any], go.Figure, go.Figure]:
        data = load_overview(pool, range_key)
        return (
            _summary(data.summary),
            heatmap_figure(data.heatmap, revision=range_key),
            rack_power_figure(data.rack_power, revision=range_key),
        )

    return app


def _summary(summary: Any) -> list[Any]:
    util = "n/a" if summary.mean_util_pct is None else f"{summary.mean_util_pct:.0f}%"
    power = "n/a" if summary.total_power_w is None else f"{summary.total_power_w / 1000:.1f} kW"
    return [
        html.Span(f"GPUs reporting: {summary.gpus_reporting} / {summary.gpus_known}", id="gpus-reporting"),
        html.Span(f" · up: {summary.gpus_up}"),
        html.Span(f" · mean utilisation: {util}"),
        html.Span(f" · total power: {power}"),
    ]
