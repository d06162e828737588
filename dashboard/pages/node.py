"""Node and GPU detail (/node/<name>?gpu=N): every metric over time, clock-event reasons, XID and other
events, InfiniBand traffic."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from dash import Dash, Input, Output, State, dcc, html

from gpuscope.dashboard import data
from gpuscope.dashboard.components import banner, guarded, nothing, query_params, query_string, table
from gpuscope.dashboard.context import Context
from gpuscope.dashboard.figures import message_figure, nic_figure, series_figure

TITLE = "Node"
# NVML clock event reasons (nvmlClocksEventReasons*)
REASONS = {
    0x1: "GPU idle",
    0x2: "applications clocks",
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x10: "sync boost",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake",
    0x100: "display clocks",
}


def match(pathname: str) -> dict[str, str] | None:
    if pathname.startswith("/node/") and len(pathname) > len("/node/"):
        return {"node": unquote(pathname[len("/node/") :])}
    return None


def layout(ctx: Context, search: str, node: str = "", **_: str) -> html.Div:
    params = query_params(search)
    gpu = params.get("gpu", "")
    range_key = params.get("range") if params.get("range") in data.RANGES_S else "1h"
    return html.Div(
        [
            html.H2(f"Node {node}" + (f", GPU {gpu}" if gpu else ""), id="node-title"),
            dcc.Store(id="node-name", data=node),
            dcc.Store(id="node-gpu", data=gpu),
            dcc.RadioItems(id="node-range", options=list(data.RANGES_S), value=range_key, inline=True),
            html.Div(id="node-status"),
            html.H3("Clock event reasons now"),
            html.Div(id="node-reasons", className="output"),
            dcc.Graph(id="node-series", config={"displaylogo": False}),
            dcc.Graph(id="node-nic", config={"displaylogo": False}),
            html.H3("Events"),
            html.Div(id="node-events", className="output"),
        ]
    )


def register(app: Dash, ctx: Context) -> None:
    def unreachable(message: str) -> tuple[Any, ...]:
        return banner(message, "error"), nothing(), message_figure(message), message_figure(message), nothing()

    @app.callback(
        Output("node-status", "children"),
        Output("node-reasons", "children"),
        Output("node-series", "figure"),
        Output("node-nic", "figure"),
        Output("node-events", "children"),
        Input("refresh", "n_intervals"),
        Input("node-range", "value"),
        State("node-name", "data"),
        State("node-gpu", "data"),
    )
    @guarded(unreachable)
    def refresh(_: int | None, range_key: str, node: str, gpu: str) -> tuple[Any, ...]:
        index = int(gpu) if gpu and gpu.isdigit() else None
        loaded = data.load_node(ctx.pool, node, index, range_key)
        if loaded is None:
            message = f"No node {node!r} in the inventory."
            return banner(message, "empty"), nothing(), message_figure(message), message_figure(message), nothing()
        revision = f"node-{node}-{gpu}-{range_key}"
        reasons = [[f"GPU {i}", decode_reasons(bits)] for i, bits in sorted(loaded.latest_reasons.items())]
        events = [
            [
                f"{e.ts:%Y-%m-%d %H:%M:%S}",
                "-" if e.gpu is None else e.gpu,
                e.kind,
                e.code if e.code is not None else "-",
                e.count,
                e.message or "",
            ]
            for e in loaded.events
        ]
        return (
            [],
            table(["GPU", "reasons"], reasons, id="reasons-table"),
            series_figure(loaded.series, data.NODE_METRICS, revision),
            nic_figure(loaded.nic, revision) if loaded.nic else message_figure("No InfiniBand ports on this node."),
            table(["time (UTC)", "GPU", "kind", "code", "count", "message"], events, id="events-table")
            if events
            else banner("No events in this range.", "empty"),
        )

    @app.callback(
        Output("url", "search", allow_duplicate=True),
        Input("node-range", "value"),
        State("node-gpu", "data"),
        prevent_initial_call=True,
    )
    def share(range_key: str, gpu: str) -> str:
        return query_string({"gpu": gpu, "range": range_key})


def decode_reasons(bits: int) -> str:
    names = [name for bit, name in REASONS.items() if bits & bit]
    return ", ".join(names) if names else "none (full clocks)"
