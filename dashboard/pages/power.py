"""Power per rack (/power): power over time per rack, stacked, and each rack's current draw against
its budget (configured with --rack-budgets, else the sum of its GPUs' power limits)."""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output, dcc, html

from gpuscope.dashboard import data, time_ranges
from gpuscope.dashboard.components import banner, guarded, query_params, query_string
from gpuscope.dashboard.context import Context
from gpuscope.dashboard.figures import budget_figure, message_figure, rack_power_figure

TITLE = "Power"


def match(pathname: str) -> dict[str, str] | None:
    return {} if pathname == "/power" else None


def layout(ctx: Context, search: str, **_: str) -> html.Div:
    range_key = query_params(search).get("range", "6h")
    return html.Div(
        [
            html.H2("Power per rack"),
            time_ranges.picker("power-range", range_key if time_ranges.valid(range_key) else "6h"),
            html.Div(id="power-status"),
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

    @app.callback(
        Output("url", "search", allow_duplicate=True), Input("power-range", "value"), prevent_initial_call=True
    )
    def share(range_key: str) -> str:
        return query_string({"range": range_key})
