"""Fleet overview (/): GPUs up, utilisation, power, running jobs, firing alerts, and what needs
attention first; a utilisation heatmap and power per rack below."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from dash import Dash, Input, Output, dcc, html

from gpuscope.dashboard import data
from gpuscope.dashboard.components import ago, badge, banner, guarded, nothing, query_params
from gpuscope.dashboard.context import Context
from gpuscope.dashboard.figures import heatmap_figure, message_figure, rack_power_figure

TITLE = "Overview"


def match(pathname: str) -> dict[str, str] | None:
    return {} if pathname in ("", "/") else None


def layout(ctx: Context, search: str, **_: str) -> html.Div:
    range_key = query_params(search).get("range", "1h")
    return html.Div(
        [
            html.H2("Cluster overview"),
            html.Div(id="overview-status"),
            html.Div(id="fleet-summary", className="output summary"),
            html.H3("Needs attention"),
            html.Div(id="attention", className="output"),
            dcc.RadioItems(id="range", options=list(data.RANGES_S), value=_valid(range_key), inline=True),
            dcc.Graph(id="util-heatmap", config={"displaylogo": False}),
            dcc.Graph(id="rack-power", config={"displaylogo": False}),
        ]
    )


def register(app: Dash, ctx: Context) -> None:
    def unreachable(message: str) -> tuple[Any, ...]:
        return banner(message, "error"), nothing(), nothing(), message_figure(message), message_figure(message)

    @app.callback(
        Output("overview-status", "children"),
        Output("fleet-summary", "children"),
        Output("attention", "children"),
        Output("util-heatmap", "figure"),
        Output("rack-power", "figure"),
        Input("refresh", "n_intervals"),
        Input("range", "value"),
    )
    @guarded(unreachable)
    def refresh(_: int | None, range_key: str) -> tuple[Any, ...]:
        overview = data.load_overview(ctx.pool, _valid(range_key))
        status: Any = [] if overview.summary.gpus_known else banner("No data yet: no exporter has reported.", "empty")
        return (
            status,
            summary_cards(overview.summary, len(overview.attention.alerts)),
            attention_list(overview.attention),
            heatmap_figure(overview.heatmap, revision=f"overview-{range_key}", height=420),
            rack_power_figure(overview.rack_power, revision=f"overview-{range_key}"),
        )


def summary_cards(summary: Any, firing: int) -> list[Any]:
    util = "n/a" if summary.mean_util_pct is None else f"{summary.mean_util_pct:.0f}%"
    power = "n/a" if summary.total_power_w is None else f"{summary.total_power_w / 1000:.1f} kW"
    cards = [
        ("gpus-reporting", f"GPUs reporting: {summary.gpus_reporting} / {summary.gpus_known}"),
        ("gpus-up", f"up: {summary.gpus_up}"),
        ("mean-util", f"mean utilisation: {util}"),
        ("total-power", f"total power: {power}"),
        ("running-jobs", f"running jobs: {summary.running_jobs}"),
        ("firing-alerts", f"firing alerts: {firing}"),
    ]
    style = {
        "display": "inline-block",
        "padding": "0.4em 0.9em",
        "marginRight": "0.6em",
        "background": "#f5f5f5",
        "borderRadius": "4px",
    }
    return [html.Span(text, id=key, style=style) for key, text in cards]


def attention_list(attention: data.Attention) -> Any:
    items: list[Any] = []
    for alert in attention.alerts[:10]:
        where = alert.labels.get("node", "")
        items.append(
            html.Li(
                [
                    badge(alert.severity),
                    " ",
                    dcc.Link(alert.alertname, href="/alerts"),
                    f" {where} ",
                    alert.annotations.get("summary", ""),
                    f" (since {ago(alert.fired_at)})",
                ]
            )
        )
    for straggler in attention.stragglers[:10]:
        items.append(
            html.Li(
                [
                    badge("warning"),
                    " straggler in ",
                    dcc.Link(f"job {straggler.job_id}", href=f"/jobs/{quote(straggler.job_id, safe='')}"),
                    f": {straggler.culprit}, {straggler.cause}, about {straggler.slowdown:.0%} slower",
                ]
            )
        )
    if attention.gpus_silent > 0:
        items.append(html.Li([badge("warning"), f" {attention.gpus_silent} GPUs have not reported in 2 minutes"]))
    if not items:
        return banner("Nothing needs attention: no firing alerts, no stragglers, every GPU reporting.", "empty")
    return html.Ul(items, id="attention-list")


def _valid(range_key: str) -> str:
    return range_key if range_key in data.RANGES_S else "1h"
