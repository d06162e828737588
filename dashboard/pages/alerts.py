"""Alerts (/alerts): firing and recent alerts, notification outcomes, rule health, and silences,
created and expired through the collector's API with an admin token typed here (read-only without)."""

from __future__ import annotations

from typing import Any

import httpx
from dash import ALL, Dash, Input, Output, State, callback_context, dcc, html, no_update

from gpuscope.dashboard import data
from gpuscope.dashboard.components import ago, badge, banner, guarded, nothing, table
from gpuscope.dashboard.context import Context

TITLE = "Alerts"
DURATIONS = {"30m": 1800, "2h": 7200, "8h": 28800, "24h": 86400, "7d": 7 * 86400}


def match(pathname: str) -> dict[str, str] | None:
    return {} if pathname == "/alerts" else None


def layout(ctx: Context, search: str, **_: str) -> html.Div:
    writable = ctx.options.collector_url is not None
    form = html.Div(
        [
            html.H3("New silence"),
            dcc.Input(
                id="silence-matchers", placeholder="node=gpu-07, alertname=GpuOverTemperature", style={"width": "28em"}
            ),
            dcc.Dropdown(
                id="silence-duration",
                options=list(DURATIONS),
                value="2h",
                clearable=False,
                style={"width": "8em", "display": "inline-block", "verticalAlign": "middle"},
            ),
            dcc.Input(id="silence-comment", placeholder="why", style={"width": "16em"}),
            dcc.Input(id="silence-token", type="password", placeholder="admin token", style={"width": "12em"}),
            html.Button("Silence", id="silence-create", disabled=not writable),
            html.Div(id="silence-result"),
        ]
    )
    if not writable:
        form.children.insert(1, banner("Read-only: start the dashboard with --collector URL to manage silences."))
    return html.Div(
        [
            html.H2("Alerts"),
            html.Div(id="alerts-status"),
            html.H3("Firing and pending"),
            html.Div(id="alerts-active", className="output"),
            html.H3("Silences"),
            html.Div(id="alerts-silences", className="output"),
            form,
            html.H3("Recently resolved"),
            html.Div(id="alerts-resolved", className="output"),
            html.H3("Notifications"),
            html.Div(id="alerts-notifications", className="output"),
            html.H3("Rules"),
            html.Div(id="alerts-rules", className="output"),
            dcc.Store(id="silence-changed", data=0),
        ]
    )


def register(app: Dash, ctx: Context) -> None:
    def unreachable(message: str) -> tuple[Any, ...]:
        return banner(message, "error"), nothing(), nothing(), nothing(), nothing(), nothing()

    @app.callback(
        Output("alerts-status", "children"),
        Output("alerts-active", "children"),
        Output("alerts-silences", "children"),
        Output("alerts-resolved", "children"),
        Output("alerts-notifications", "children"),
        Output("alerts-rules", "children"),
        Input("refresh", "n_intervals"),
        Input("silence-changed", "data"),
    )
    @guarded(unreachable)
    def refresh(_: int | None, __: int) -> tuple[Any, ...]:
        loaded = data.load_alerts(ctx.pool)
        return (
            [],
            _alerts(loaded.active, "alerts-active-table", "No alert is firing or pending."),
            _silences(loaded.silences, ctx.options.collector_url is not None),
            _alerts(loaded.resolved, "alerts-resolved-table", "Nothing resolved recently."),
            _notifications(loaded.notifications),
            table(
                ["group", "rule", "evaluated", "ms", "alerts", "error"],
                [
                    [
                        r.rule_group,
                        r.alertname,
                        ago(r.evaluated_at),
                        f"{r.seconds * 1000:.1f}",
                        r.instances,
                        r.error or "",
                    ]
                    for r in loaded.rules
                ],
                id="rules-table",
            )
            if loaded.rules
            else banner("No rule has been evaluated yet.", "empty"),
        )

    @app.callback(
        Output("silence-result", "children"),
        Output("silence-changed", "data"),
        Input("silence-create", "n_clicks"),
        Input({"type": "silence-expire", "index": ALL}, "n_clicks"),
        State("silence-matchers", "value"),
        State("silence-duration", "value"),
        State("silence-comment", "value"),
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
        token: str | None,
        changed: int,
    ) -> tuple[Any, Any]:
        trigger = callback_context.triggered_id
        if trigger is None or (isinstance(trigger, dict) and not any(expires)):
            return no_update, no_update
        if ctx.options.collector_url is None:
            return banner("Read-only dashboard.", "error"), no_update
        if not token:
            return banner("Type the admin token first.", "error"), no_update
        headers = {"Authorization": f"Bearer {token.strip()}"}
        base = ctx.options.collector_url.rstrip("/") + "/api/v1/silences"
        try:
            if isinstance(trigger, dict):
                response = httpx.delete(f"{base}/{int(trigger['index'])}", headers=headers, timeout=10)
            else:
                parts = [m.strip() for m in (matchers or "").split(",") if m.strip()]
                if not parts:
                    return banner("Give at least one matcher, e.g. node=gpu-07.", "error"), no_update
                body = {
                    "matchers": parts,
                    "duration_s": DURATIONS[duration],
                    "comment": comment or "",
                    "created_by": "dashboard",
                }
                response = httpx.post(base, json=body, headers=headers, timeout=10)
        except httpx.HTTPError as exc:
            return banner(f"Collector unreachable: {type(exc).__name__}", "error"), no_update
        if response.status_code >= 300:
            detail = response.json().get("detail", response.text) if _is_json(response) else response.text
            return banner(f"Refused (HTTP {response.status_code}): {detail}", "error"), no_update
        silence = response.json()
        verb = "Expired" if isinstance(trigger, dict) else "Created"
        return banner(f"{verb} silence {silence['id']}.", "info"), changed + 1


def _alerts(rows: list[Any], id: str, empty: str) -> Any:
    if not rows:
        return banner(empty, "empty")
    body = []
    for a in rows:
        where = ", ".join(f"{k}={v}" for k, v in sorted(a.labels.items()) if k not in ("alertname", "severity"))
        muted = f"silenced by {', '.join(map(str, a.silenced_by))}" if a.silenced_by else ""
        since = ago(a.resolved_at if a.state == "resolved" else (a.fired_at or a.active_at))
        body.append([badge(a.severity), a.alertname, a.state, where, a.annotations.get("summary", ""), since, muted])
    return table(["severity", "alert", "state", "labels", "summary", "since", ""], body, id=id)


def _silences(rows: list[Any], writable: bool) -> Any:
    if not rows:
        return banner("No active silences.", "empty")
    body = []
    for s in rows:
        matchers = ", ".join(f"{m.name}{m.op}{m.value}" for m in s.matchers)
        button = html.Button("Expire", id={"type": "silence-expire", "index": s.silence_id}, disabled=not writable)
        body.append([s.silence_id, matchers, s.created_by, s.comment, f"until {s.ends_at:%Y-%m-%d %H:%M} UTC", button])
    return table(["id", "matchers", "by", "comment", "ends", ""], body, id="silences-table")


def _notifications(rows: list[Any]) -> Any:
    if not rows:
        return banner("No notification has been queued.", "empty")
    body = [
        [
            ago(n.created_at),
            n.receiver,
            ", ".join(n.alertnames),
            f"{n.firing} firing, {n.resolved} resolved",
            n.status,
            n.attempts,
            n.http_status or "-",
            n.last_error or "",
        ]
        for n in rows
    ]
    return table(
        ["queued", "receiver", "alerts", "", "outcome", "attempts", "HTTP", "last error"], body, id="notify-table"
    )


def _is_json(response: httpx.Response) -> bool:
    return response.headers.get("content-type", "").startswith("application/json")
