"""Activity heatmap (/heatmap): GPUs grouped by rack and node on y, time on x; metric, range and row
level in the URL; a click on a cell opens that node's page (its GPU, when rows are GPUs).

It opens on SM activity, as the overview does: utilisation counts a rank spinning in NCCL as busy, so a
straggler's waiting peers hide in it. SM clock shows throttling (a node's row is its slowest GPU). A
metric, range or level the page does not know is named in a message, never silently replaced."""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import quote

from dash import Dash, Input, Output, State, dcc, html, no_update

from gpuscope.dashboard import data, time_ranges
from gpuscope.dashboard.components import MUTED, address_for, banner, guarded, query_params, query_string
from gpuscope.dashboard.context import Context
from gpuscope.dashboard.figures import METRICS, heatmap_figure, message_figure, unplain
from gpuscope.dashboard.grid import Grid

TITLE = "Heatmap"
HEATMAP_METRICS = (
    "sm_active_pct",
    "util_pct",
    "tensor_active_pct",
    "sm_clock_mhz",
    "temp_c",
    "power_w",
    "fb_used_bytes",
)
DEFAULT_METRIC = data.OVERVIEW_METRIC  # the overview's too; data.load_grid falls back to utilisation
DEFAULT_RANGE = "1h"
LEVELS = {"auto": "auto", "gpu": "GPUs", "node": "nodes", "rack": "racks"}


def match(pathname: str) -> dict[str, str] | None:
    return {} if pathname == "/heatmap" else None


def layout(ctx: Context, search: str, **_: str) -> html.Div:
    metric, range_key, level, unknown = view_params(query_params(search))
    return html.Div(
        [
            html.H2("Heatmap"),
            html.Div([banner(text, "error") for text in unknown], id="heatmap-params"),
            html.Div(
                [
                    dcc.Dropdown(
                        id="heatmap-metric",
                        options=[{"label": METRICS[m], "value": m} for m in HEATMAP_METRICS],
                        value=metric,
                        clearable=False,
                        style={"width": "18em", "display": "inline-block"},
                    ),
                    dcc.RadioItems(
                        id="heatmap-level",
                        options=[{"label": v, "value": k} for k, v in LEVELS.items()],
                        value=level,
                        inline=True,
                        style={"display": "inline-block", "margin": "0 2em"},
                    ),
                ]
            ),
            time_ranges.picker("heatmap-range", range_key),
            html.Div(id="heatmap-status"),
            dcc.Graph(id="heatmap-graph", config={"displaylogo": False}),
            dcc.Store(id="heatmap-targets", data={}),
            html.Div("Click a cell to open its node.", style={"color": MUTED}),
        ]
    )


def view_params(params: dict[str, str]) -> tuple[str, str, str, list[str]]:
    """The metric, range and level the URL asks for, with what the page will show instead of any it
    does not know, in words."""
    unknown = []
    metric = params.get("metric", DEFAULT_METRIC)
    if metric not in HEATMAP_METRICS:
        unknown.append(
            f"Unknown metric {metric!r}: showing {METRICS[DEFAULT_METRIC]} (one of {', '.join(HEATMAP_METRICS)})."
        )
        metric = DEFAULT_METRIC
    range_key = params.get("range", DEFAULT_RANGE)
    try:
        time_ranges.parse(range_key)
    except ValueError as exc:
        unknown.append(f"{str(exc)[:1].upper()}{str(exc)[1:]}; showing the last {DEFAULT_RANGE}.")
        range_key = DEFAULT_RANGE
    level = params.get("level", "auto")
    if level not in LEVELS:
        unknown.append(f"Unknown level {level!r}: showing auto (one of {', '.join(LEVELS)}).")
        level = "auto"
    return metric, range_key, level, unknown


def register(app: Dash, ctx: Context) -> None:
    time_ranges.register(app, "heatmap-range")

    def unreachable(message: str) -> tuple[Any, ...]:
        return banner(message, "error"), message_figure(message), {}

    @app.callback(
        Output("heatmap-status", "children"),
        Output("heatmap-graph", "figure"),
        Output("heatmap-targets", "data"),
        Input("refresh", "n_intervals"),
        Input("heatmap-metric", "value"),
        Input("heatmap-range", "value"),
        Input("heatmap-level", "value"),
    )
    @guarded(unreachable)
    def refresh(_: int | None, metric: str, range_key: str, level: str) -> tuple[Any, ...]:
        grid = data.load_grid(ctx.pool, metric, range_key, level)
        notes = []
        if grid.metric != metric:
            metric = grid.metric
            notes.append(banner("No GPU here reports SM activity (no DCGM profiling): showing utilisation."))
        if level not in ("auto", grid.level):
            notes.append(banner(f"{LEVELS[level]} would exceed the cell budget here: showing {LEVELS[grid.level]}."))
        # The revision changes with the view, so zoom survives refreshes but not a new question.
        return notes, heatmap_figure(grid, revision=f"{metric}-{range_key}-{grid.level}"), click_targets(grid)

    @app.callback(
        Output("url", "search", allow_duplicate=True),
        Input("heatmap-metric", "value"),
        Input("heatmap-range", "value"),
        Input("heatmap-level", "value"),
        State("url", "search"),
        prevent_initial_call=True,
    )
    def share(metric: str, range_key: str, level: str, search: str | None) -> Any:
        defaults = {"metric": DEFAULT_METRIC, "range": DEFAULT_RANGE, "level": "auto"}
        return address_for(search, {"metric": metric, "range": range_key, "level": level}, defaults)

    @app.callback(
        Output("url", "pathname", allow_duplicate=True),
        Output("url", "search", allow_duplicate=True),
        Input("heatmap-graph", "clickData"),
        State("heatmap-targets", "data"),
        State("heatmap-range", "value"),
        prevent_initial_call=True,
    )
    def drill(click: dict[str, Any] | None, targets: dict[str, Any] | None, range_key: str) -> tuple[Any, Any]:
        point = (click or {}).get("points", [{}])[0]
        target = row_target(unplain(str(point.get("y", ""))), targets or {})  # the figure shows labels escaped
        if target is None:
            return no_update, no_update  # a rack row: nothing finer to open
        node, gpu = target
        # One path segment whatever the name holds ('/', '?', '#', '%', spaces): the node page unquotes it.
        return f"/node/{quote(node, safe='')}", query_string({"gpu": gpu, "range": range_key})


def click_targets(grid: Grid) -> dict[str, tuple[int, int, int | None]]:
    """Where the node's name sits in each row's label, and the row's GPU, for the page to keep beside
    the figure. A click on a heatmap reports the row's label but no per-cell custom data (Dash drops
    array point numbers), and 'rack/node/gpuN' cannot be split at '/' once a name contains one. Keyed
    by a short digest of the label and holding offsets, not names: the click sends the whole map back,
    a few dozen bytes per row however long the names are."""
    targets = {}
    for row in grid.rows:
        if row.node is None:
            continue  # a rack row: nothing finer to open
        end = len(row.label) - (len(f"/gpu{row.gpu}") if row.gpu is not None else 0)
        start = end - len(row.node)
        if row.label[start:end] == row.node:
            targets[_key(row.label)] = (start, end, row.gpu)
    return targets


def row_target(label: str, targets: dict[str, Any]) -> tuple[str, int | None] | None:
    """The node (and GPU) of the row labelled `label` (unescaped), or None: a rack row, or a label the
    page no longer shows."""
    found = targets.get(_key(label))
    if not isinstance(found, list | tuple) or len(found) != 3:
        return None
    start, end, gpu = found
    return label[start:end], gpu


def _key(label: str) -> str:
    return hashlib.blake2b(label.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
