"""Node and GPU detail (/node/<name>?gpu=N): what needs an operator and since when, the jobs on it, XID
errors with what each calls for, GPU memory (ECC, row remapping), InfiniBand ports, NVLink and energy;
then every metric over time (of GPU N only, with ?gpu=N), clock-event reasons and events. A node the
inventory does not know gets one message and the way back."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from dash import Dash, Input, Output, State, callback_context, dcc, html
from dash.exceptions import PreventUpdate

from gpuscope.core.clock_reasons import reason_words
from gpuscope.dashboard import data, node_panels, time_ranges
from gpuscope.dashboard.components import (
    address_for,
    banner,
    guarded,
    node_href,
    nothing,
    query_params,
    table,
)
from gpuscope.dashboard.context import Context
from gpuscope.dashboard.figures import message_figure, nic_figure, series_figure
from gpuscope.dashboard.node_data import findings, load_node_health, node_known
from gpuscope.dashboard.not_found import not_found

TITLE = "Node"
# The health panels read raw samples (counters have no rollups): a long range is read again about every
# 1/1440th of its length (a minute for 24 h), not at every refresh; its newest minute barely moves it.
HEALTH_EVERY_FRACTION = 1 / 1440


def match(pathname: str) -> dict[str, str] | None:
    if pathname.startswith("/node/") and len(pathname) > len("/node/"):
        return {"node": unquote(pathname[len("/node/") :])}
    return None


def layout(ctx: Context, search: str, node: str = "", **_: str) -> html.Div:
    # Unreachable database: the page as usual, whose callbacks say so.
    if not guarded(lambda _message: True)(node_known)(ctx.pool, node):
        message = f"No node {node!r} in the telemetry: no GPU or InfiniBand port of it has reported."
        return not_found(f"Node {node}", message, "/", "the overview")
    params = query_params(search)
    gpu = params.get("gpu", "")
    range_key = params.get("range") or "1h"
    range_key = range_key if time_ranges.valid(range_key) else "1h"
    return html.Div(
        [
            html.H2(title(node, gpu), id="node-title"),
            html.Div(scope(node, gpu), id="node-scope"),
            dcc.Store(id="node-name", data=node),
            dcc.Store(id="node-gpu", data=gpu),
            time_ranges.picker("node-range", range_key),
            html.Div(id="node-status"),
            html.H3("What needs attention"),
            html.Div(id="node-findings", className="output"),
            html.H3("Jobs"),
            html.Div(id="node-jobs", className="output"),
            html.H3("XID errors"),
            html.Div(id="node-xids", className="output"),
            html.H3("GPU memory: ECC errors and row remapping"),
            html.Div(id="node-memory", className="output"),
            html.H3("InfiniBand ports"),
            html.Div(id="node-ib", className="output"),
            dcc.Graph(id="node-nic", config={"displaylogo": False}),
            html.H3("NVLink"),
            html.Div(id="node-nvlink", className="output"),
            dcc.Graph(id="node-nvlink-graph", config={"displaylogo": False}),
            html.H3("Energy"),
            html.Div(id="node-energy", className="output"),
            html.H3("Clock event reasons now"),
            html.Div(id="node-reasons", className="output"),
            dcc.Graph(id="node-series", config={"displaylogo": False}),
            html.H3("Events"),
            html.Div(id="node-events", className="output"),
        ]
    )


def register(app: Dash, ctx: Context) -> None:
    time_ranges.register(app, "node-range")

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
        Input("node-gpu", "data"),
        State("node-name", "data"),
    )
    @guarded(unreachable)
    def refresh(_: int | None, range_key: str, gpu: str, node: str) -> tuple[Any, ...]:
        index = int(gpu) if gpu and gpu.isdigit() else None
        no_gpu = f"No GPU {gpu!r} on node {node!r}: its GPUs are numbered from 0 (see all of them above)."
        if gpu and index is None:
            return banner(no_gpu, "error"), nothing(), message_figure(no_gpu), message_figure(no_gpu), nothing()
        loaded = data.load_node(ctx.pool, node, index, range_key)
        if loaded is None:
            message = f"No node {node!r} in the inventory."
            return banner(message, "empty"), nothing(), message_figure(message), message_figure(message), nothing()
        if index is not None and not loaded.series.rows:
            return banner(no_gpu, "error"), nothing(), message_figure(no_gpu), message_figure(no_gpu), nothing()
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
            series_figure(
                loaded.series, data.NODE_METRICS, revision, {"fb_used_bytes": loaded.memory_total_bytes}, loaded.jobs
            ),
            nic_figure(loaded.nic, revision) if loaded.nic else message_figure("No InfiniBand ports on this node."),
            table(["time (UTC)", "GPU", "kind", "code", "count", "message"], events, id="events-table")
            if events
            else banner("No events in this range.", "empty"),
        )

    def health_unreachable(message: str) -> tuple[Any, ...]:
        return banner(message, "error"), *(nothing(),) * 5, message_figure(message), nothing()

    @app.callback(
        Output("node-findings", "children"),
        Output("node-jobs", "children"),
        Output("node-xids", "children"),
        Output("node-memory", "children"),
        Output("node-ib", "children"),
        Output("node-nvlink", "children"),
        Output("node-nvlink-graph", "figure"),
        Output("node-energy", "children"),
        Input("refresh", "n_intervals"),
        Input("node-range", "value"),
        State("node-name", "data"),
    )
    @guarded(health_unreachable)
    def refresh_health(ticks: int | None, range_key: str, node: str) -> tuple[Any, ...]:
        if callback_context.triggered_id == "refresh" and not health_due(ticks, range_key, ctx.options.refresh_ms):
            raise PreventUpdate
        loaded = load_node_health(ctx.pool, node, range_key)
        if loaded is None:  # the status banner says so
            return *(nothing(),) * 6, message_figure(f"No node {node!r} in the inventory."), nothing()
        return (
            node_panels.findings_panel(findings(loaded)),
            node_panels.jobs_panel(loaded.jobs),
            node_panels.xid_panel(loaded.xids),
            node_panels.memory_panel(loaded.gpus),
            node_panels.ib_panel(loaded.ports),
            node_panels.nvlink_panel(loaded.gpus, loaded.nvlink),
            node_panels.nvlink_figure(loaded.gpus, loaded.nvlink, f"nvlink-{node}-{range_key}"),
            node_panels.energy_panel(loaded),
        )

    @app.callback(
        Output("node-gpu", "data"),
        Output("node-title", "children"),
        Output("node-scope", "children"),
        Input("url", "search"),
        State("node-gpu", "data"),
        State("node-name", "data"),
        prevent_initial_call=True,
    )
    def follow(search: str | None, shown: str, node: str) -> tuple[Any, ...]:
        """A link on the page to another of its GPUs, or to all of them, changes the address only."""
        gpu = query_params(search).get("gpu", "")
        if gpu == shown:
            raise PreventUpdate
        return gpu, title(node, gpu), scope(node, gpu)

    @app.callback(
        Output("url", "search", allow_duplicate=True),
        Input("node-range", "value"),
        State("node-gpu", "data"),
        State("url", "search"),
        prevent_initial_call=True,
    )
    def share(range_key: str, gpu: str, search: str | None) -> Any:
        return address_for(search, {"gpu": gpu, "range": range_key}, {"range": "1h"})


def title(node: str, gpu: str) -> str:
    return f"Node {node}" + (f", GPU {gpu}" if gpu else "")


def scope(node: str, gpu: str) -> Any:
    """On one GPU: the way to all of the node's."""
    if not gpu:
        return nothing()
    return dcc.Link(f"show all GPUs of {node}", href=node_href(node), id="node-all-gpus")


def health_due(ticks: int | None, range_key: str, refresh_ms: int) -> bool:
    """Whether this refresh reads the health panels again (see HEALTH_EVERY_FRACTION)."""
    every = max(1, round(data.time_range(range_key).seconds * HEALTH_EVERY_FRACTION * 1000 / refresh_ms))
    return (ticks or 0) % every == 0


def decode_reasons(bits: int) -> str:
    names = reason_words(bits)
    return ", ".join(names) if names else "none (full clocks)"
