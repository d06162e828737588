"""Alerts (/alerts): firing and recent alerts with their labels made readable (node, GPU and job linked to
their pages), a "Silence this" button on each that fills the silence form with its labels; silences with
who created each and why, created and expired through the collector's API with an admin token typed here
(read-only without); notification outcomes and rule health."""

from __future__ import annotations

from typing import Any

from dash import ALL, Dash, Input, Output, State, callback_context, dcc, html, no_update

from gpuscope.dashboard import data, silence_requests
from gpuscope.dashboard.alert_labels import split_matchers
from gpuscope.dashboard.alert_tables import (
    alerts_table,
    matching,
    notifications_table,
    rules_table,
    silence_matchers_by_alert,
    silences_table,
)
from gpuscope.dashboard.components import MUTED, banner, guarded, nothing, query_params
from gpuscope.dashboard.context import Context

TITLE = "Alerts"
# What the URL may narrow the page to (?node=gpu-07, ?job_id=4711, ...), each in words.
FILTERS = {"alertname": "alert", "cluster": "cluster", "rack": "rack", "node": "node", "gpu": "GPU", "job_id": "job"}
DURATIONS = {"30m": 1800, "2h": 7200, "8h": 28800, "24h": 86400, "7d": 7 * 86400}
# Scrolls the form into view and puts the cursor on "why" once "Silence this" has filled it in.
FOCUS_JS = """
function(prefilled) {
    const why = document.getElementById('silence-comment');
    if (prefilled && why) { why.scrollIntoView({block: 'center'}); why.focus(); }
    return window.dash_clientside.no_update;
}
"""


def match(pathname: str) -> dict[str, str] | None:
    return {} if pathname == "/alerts" else None


def layout(ctx: Context, search: str, **_: str) -> html.Div:
    wanted = {name: value for name, value in query_params(search).items() if name in FILTERS and value}
    return html.Div(
        [
            html.H2("Alerts"),
            html.Div(id="alerts-status"),
            _filtered(wanted),
            html.H3("Firing and pending"),
            html.Div(id="alerts-active", className="output"),
            _silence_form(ctx),
            html.H3("Silences"),
            html.Div(id="alerts-silences", className="output"),
            html.H3("Recently resolved"),
            html.Div(id="alerts-resolved", className="output"),
            html.H3("Notifications"),
            html.Div(id="alerts-notifications", className="output"),
            html.H3("Rules"),
            html.Div(id="alerts-rules", className="output"),
            dcc.Store(id="alerts-filter", data=wanted),
            dcc.Store(id="silence-changed", data=0),
            dcc.Store(id="silence-matchers-by-alert", data={}),
            dcc.Store(id="silence-prefilled", data=0),
            dcc.Store(id="silence-focused"),
        ]
    )


def _filtered(wanted: dict[str, str]) -> Any:
    """Which alerts the page shows when the URL narrows it (the overview's "+N more" links here)."""
    if not wanted:
        return html.Div(id="alerts-filtered")
    which = ", ".join(f"{FILTERS[name]} {value}" for name, value in wanted.items())
    # A whole page load: the page is drawn anew only when its path changes, not its query.
    everything = html.A("show all alerts", href="/alerts", id="alerts-show-all")
    return html.Div([f"Only the alerts of {which} · ", everything], id="alerts-filtered", className="banner")


def _silence_form(ctx: Context) -> html.Div:
    writable = ctx.options.collector_url is not None
    user = silence_requests.signed_in_user()
    who: Any = dcc.Input(
        id="silence-author",
        placeholder="your name",
        persistence=True,  # typed once per browser
        persistence_type="local",
        style={"width": "10em"},
    )
    if user:  # the login says who: the server takes it from the request, not from this field
        who = html.Span([f"as {user} ", dcc.Input(id="silence-author", value=user, disabled=True, type="hidden")])
    form = html.Div(
        [
            html.H3("New silence"),
            html.Div(
                "“Silence this” on an alert fills in its labels; say why, then Silence.",
                style={"color": MUTED, "fontSize": "0.9em"},
            ),
            dcc.Input(
                id="silence-matchers", placeholder="node=gpu-07, alertname=GpuOverTemperature", style={"width": "36em"}
            ),
            dcc.Dropdown(
                id="silence-duration",
                options=list(DURATIONS),
                value="2h",
                clearable=False,
                style={"width": "8em", "display": "inline-block", "verticalAlign": "middle"},
            ),
            dcc.Input(id="silence-comment", placeholder="why (e.g. fan swap, ticket)", style={"width": "16em"}),
            who,
            dcc.Input(id="silence-token", type="password", placeholder="admin token", style={"width": "12em"}),
            html.Button("Silence", id="silence-create", disabled=not writable),
            html.Div(id="silence-result"),
        ],
        id="silence-form",
    )
    if not writable:
        form.children.insert(1, banner("Read-only: start the dashboard with --collector URL to manage silences."))
    return form


def register(app: Dash, ctx: Context) -> None:
    writable = ctx.options.collector_url is not None

    def unreachable(message: str) -> tuple[Any, ...]:
        return banner(message, "error"), nothing(), nothing(), nothing(), nothing(), nothing(), {}

    @app.callback(
        Output("alerts-status", "children"),
        Output("alerts-active", "children"),
        Output("alerts-silences", "children"),
        Output("alerts-resolved", "children"),
        Output("alerts-notifications", "children"),
        Output("alerts-rules", "children"),
        Output("silence-matchers-by-alert", "data"),
        Input("refresh", "n_intervals"),
        Input("silence-changed", "data"),
        State("alerts-filter", "data"),
    )
    @guarded(unreachable)
    def refresh(_: int | None, __: int, wanted: dict[str, str] | None) -> tuple[Any, ...]:
        loaded = data.load_alerts(ctx.pool)
        active, resolved = matching(loaded.active, wanted or {}), matching(loaded.resolved, wanted or {})
        return (
            [],
            alerts_table(active, "alerts-active-table", "No alert is firing or pending.", loaded.silences, writable),
            silences_table(loaded.silences, writable),
            alerts_table(resolved, "alerts-resolved-table", "Nothing resolved recently.", [], False),
            notifications_table(loaded.notifications),
            rules_table(loaded.rules),
            silence_matchers_by_alert(loaded.active),
        )

    @app.callback(
        Output("silence-matchers", "value"),
        Output("silence-result", "children", allow_duplicate=True),
        Output("silence-prefilled", "data"),
        Input({"type": "silence-alert", "index": ALL}, "n_clicks"),
        State("silence-matchers-by-alert", "data"),
        State("silence-prefilled", "data"),
        prevent_initial_call=True,
    )
    def prefill(clicks: list[int | None], by_alert: dict[str, str], prefilled: int) -> tuple[Any, Any, Any]:
        trigger = callback_context.triggered_id
        # A refresh draws the buttons anew (no clicks): only a click fills the form.
        if not isinstance(trigger, dict) or not callback_context.triggered[0]["value"]:
            return no_update, no_update, no_update
        matchers = (by_alert or {}).get(str(trigger["index"]))
        if matchers is None:
            return no_update, banner("That alert is gone; nothing filled in.", "error"), no_update
        return matchers, banner("Filled in from the alert: say why, then Silence.", "info"), prefilled + 1

    app.clientside_callback(FOCUS_JS, Output("silence-focused", "data"), Input("silence-prefilled", "data"))

    @app.callback(
        Output("silence-result", "children"),
        Output("silence-changed", "data"),
        Input("silence-create", "n_clicks"),
        Input({"type": "silence-expire", "index": ALL}, "n_clicks"),
        State("silence-matchers", "value"),
        State("silence-duration", "value"),
        State("silence-comment", "value"),
        State("silence-author", "value"),
        State("silence-token", "value"),
        State("silence-changed", "data"),
        prevent_initial_call=True,
    )
    def change(
        _: int | None,
        expires: list[int | None],
        matchers: str | None,
        duration: str,
        comment: str | None,
        typed_author: str | None,
        token: str | None,
        changed: int,
    ) -> tuple[Any, Any]:
        trigger = callback_context.triggered_id
        if trigger is None or (isinstance(trigger, dict) and not callback_context.triggered[0]["value"]):
            return no_update, no_update
        if ctx.options.collector_url is None:
            return banner("Read-only dashboard.", "error"), no_update
        if not token:
            return banner("Type the admin token first.", "error"), no_update
        if isinstance(trigger, dict):
            outcome = silence_requests.expire(ctx.options.collector_url, token, int(trigger["index"]))
        else:
            parts = split_matchers(matchers or "")
            created_by = silence_requests.author(typed_author)
            if not parts:
                return banner("Give at least one matcher, e.g. node=gpu-07.", "error"), no_update
            if not (comment or "").strip():
                return banner("Say why: the silences list shows it to everyone the alert concerns.", "error"), no_update
            if created_by is None:
                return banner("Type your name: the silence records who created it.", "error"), no_update
            outcome = silence_requests.create(
                ctx.options.collector_url, token, parts, DURATIONS[duration], (comment or "").strip(), created_by
            )
        if not outcome.ok:
            return banner(outcome.message, "error"), no_update
        return banner(outcome.message, "info"), changed + 1
