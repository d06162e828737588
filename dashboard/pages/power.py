"""Power per rack (/power): power over time per rack, stacked, and each rack's current draw against
its budget (configured with --rack-budgets, else the sum of its GPUs' power limits). A rack (`?rack=
cluster/rack`, or a click on its bar or band) shows its nodes and the jobs on them now: from "rack-01
near budget" to what draws the power in one click."""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output, State, dcc, html
from dash import ctx as callback_context
from dash.exceptions import PreventUpdate

from gpuscope.dashboard import data, time_ranges
from gpuscope.dashboard.components import (
    address_for,
    banner,
    guarded,
    job_href,
    node_href,
    nothing,
    query_params,
    query_string,
    table,
)
from gpuscope.dashboard.context import Context
from gpuscope.dashboard.figures import budget_figure, message_figure, rack_power_figure, unplain

TITLE = "Power"
DEFAULT_RANGE = "6h"


def match(pathname: str) -> dict[str, str] | None:
    return {} if pathname == "/power" else None


def layout(ctx: Context, search: str, **_: str) -> html.Div:
    range_key = query_params(search).get("range", DEFAULT_RANGE)
    return html.Div(
        [
            html.H2("Power per rack"),
            html.P("Click a rack's bar or band for its nodes and the jobs on them now.", className="muted"),
            time_ranges.picker("power-range", range_key if time_ranges.valid(range_key) else DEFAULT_RANGE),
            html.Div(id="power-status"),
            html.Div(id="power-rack"),
            dcc.Graph(id="power-stacked", config={"displaylogo": False}),
            dcc.Graph(id="power-budget", config={"displaylogo": False}),
        ]
    )


def register(app: Dash, ctx: Context) -> None:
    time_ranges.register(app, "power-range")

    def unreachable(message: str) -> tuple[Any, ...]:
        return banner(message, "error"), message_figure(message), message_figure(message)

    @app.callback(
        Output("power-status", "children"),
        Output("power-stacked", "figure"),
        Output("power-budget", "figure"),
        Input("refresh", "n_intervals"),
        Input("power-range", "value"),
    )
    @guarded(unreachable)
    def refresh(_: int | None, range_key: str) -> tuple[Any, ...]:
        power = data.load_power(ctx.pool, range_key, ctx.options.rack_budgets_kw)
        over = [r for r, c, b in zip(power.racks, power.current_kw, power.budget_kw, strict=True) if c and b and c > b]
        status: Any = banner(f"Over budget: {', '.join(over)}", "error") if over else []
        return (
            status,
            rack_power_figure(power.rack_power, revision=f"power-{range_key}"),
            budget_figure(power.racks, power.current_kw, power.budget_kw),
        )

    @app.callback(Output("power-rack", "children"), Input("url", "search"), Input("refresh", "n_intervals"))
    @guarded(lambda message: banner(message, "error"))
    def rack(search: str | None, _: int | None) -> Any:
        name = query_params(search).get("rack")
        if not name:
            return nothing()
        view = data.load_rack(ctx.pool, name, ctx.options.rack_budgets_kw)
        if view is None:
            return banner(f"No rack {name} in the inventory (racks are named cluster/rack).", "empty")
        return rack_view(view, query_params(search).get("range"))

    @app.callback(
        Output("url", "search", allow_duplicate=True),
        Input("power-budget", "clickData"),
        Input("power-stacked", "clickData"),
        State("power-range", "value"),
        prevent_initial_call=True,
    )
    def open_rack(bar: dict[str, Any] | None, band: dict[str, Any] | None, range_key: str) -> str:
        click = band if callback_context.triggered_id == "power-stacked" else bar
        points = (click or {}).get("points") or [{}]
        name = points[0].get("customdata")  # both figures carry each point's rack name, escaped
        if not isinstance(name, str):
            raise PreventUpdate
        return query_string({"range": range_key, "rack": unplain(name)})

    @app.callback(
        Output("url", "search", allow_duplicate=True),
        Input("power-range", "value"),
        State("url", "search"),
        prevent_initial_call=True,
    )
    def share(range_key: str, search: str | None) -> Any:
        rack = query_params(search).get("rack")
        return address_for(search, {"range": range_key, "rack": rack}, {"range": DEFAULT_RANGE})


def rack_view(view: data.RackView, range_key: str | None) -> html.Div:
    """The rack's nodes, the hungriest first, and the jobs on them now."""
    drawn = sum(node.power_w or 0.0 for node in view.nodes) / 1000
    budget = f" of its {view.budget_kw:g} kW budget ({drawn / view.budget_kw:.0%})" if view.budget_kw else ""
    node_rows = [
        [
            dcc.Link(node.name, href=node_href(node.name)),
            f"{node.gpus_reporting} of {node.gpus}",
            "-" if node.power_w is None else f"{node.power_w / 1000:.2f}",
            "-" if node.power_limit_w is None else f"{node.power_limit_w / 1000:.2f}",
            _links(node.jobs),
        ]
        for node in view.nodes
    ]
    job_rows = [
        [dcc.Link(job.job_id, href=job_href(job.job_id)), job.user or "-", str(job.nodes), str(job.gpus)]
        for job in view.jobs
    ]
    return html.Div(
        [
            html.H3(f"Rack {view.rack} now: {drawn:.1f} kW{budget}"),
            dcc.Link("all racks", href="/power" + query_string({"range": range_key})),
            table(["node", "GPUs reporting", "kW now", "kW limit", "jobs now"], node_rows, id="rack-nodes"),
            table(["job", "user", "nodes here", "GPUs here"], job_rows, id="rack-jobs")
            if job_rows
            else banner("No job runs on this rack now.", "empty"),
        ],
        id="rack-view",
    )


def _links(jobs: list[str]) -> Any:
    if not jobs:
        return "-"
    parts: list[Any] = []
    for job_id in jobs:
        parts += [", "] if parts else []
        parts.append(dcc.Link(job_id, href=job_href(job_id)))
    return html.Span(parts)
