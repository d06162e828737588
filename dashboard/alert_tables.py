"""The alerts page's tables: alerts with their labels made readable (dashboard/alert_labels.py) and a
"Silence this" button on each one not yet silenced; silences with who created each and why;
notification outcomes; rule health."""

from __future__ import annotations

import re
from typing import Any

from dash import html

from gpuscope.alerts.reads import AlertRow, NotificationRow, RuleStatus
from gpuscope.alerts.silences import Silence
from gpuscope.dashboard import alert_labels
from gpuscope.dashboard.components import MUTED, ago, badge, banner, styled_table, table

# The alerts tables' columns: a class each, so that the stylesheet fits the table to the page (fixed widths
# for all but the summary, which takes the rest) and keeps each row to one or two lines.
ALERT_COLUMNS = (
    ("severity", "severity"),
    ("alert", "alert"),
    ("where", "where · job"),
    ("summary", "summary"),
    ("labels", "labels"),
    ("since", "since"),
)


def alerts_table(rows: list[AlertRow], id: str, empty: str, silences: list[Silence], can_silence: bool) -> Any:
    """Alerts, one row each; with `can_silence`, a "Silence this" button where no silence mutes it yet."""
    if not rows:
        return banner(empty, "empty")
    by_id = {s.silence_id: s for s in silences}
    columns = [*ALERT_COLUMNS, ("silence", "")] if can_silence else list(ALERT_COLUMNS)
    body = []
    for a in rows:
        # Since when its condition holds (as the data says, where the rule tells: alerts/state.py), or when
        # it resolved; when it fired, on hover.
        at = a.resolved_at if a.state == "resolved" and a.resolved_at else a.active_at
        fired = f", firing since {a.fired_at:%Y-%m-%d %H:%M:%S} UTC" if a.fired_at and a.state != "resolved" else ""
        summary = a.annotations.get("summary", "")
        place = alert_labels.where(a.labels)
        job = alert_labels.job(a.labels)
        cells = [
            badge(a.severity),
            [
                html.Strong(_breakable(a.alertname)),
                *([" ", html.Span(a.state, className="muted")] if a.state != "firing" else []),
            ],
            _two_lines([*place, *([" · "] if place and job else []), *job]),
            _two_lines(summary, title=summary),
            _two_lines(alert_labels.details(a.labels)),
            html.Span(ago(at), title=f"{at:%Y-%m-%d %H:%M:%S} UTC{fired}"),
        ]
        if can_silence:
            cells.append(_muted(a, by_id) if a.silenced_by else _silence_button(a))
        body.append(html.Tr([html.Td(c, className=f"col-{key}") for (key, _), c in zip(columns, cells, strict=True)]))
    head = html.Thead(html.Tr([html.Th(label, className=f"col-{key}") for key, label in columns]))
    fitted = styled_table([head, html.Tbody(body)], id=id)
    fitted.className = "table alerts-table"
    return fitted


def matching(rows: list[AlertRow], wanted: dict[str, str]) -> list[AlertRow]:
    """The alerts whose labels have these values (the page's ?node=..., ?job_id=... filters)."""
    return [a for a in rows if all(a.labels.get(name) == value for name, value in wanted.items())]


def _breakable(name: str) -> list[Any]:
    """An alert's name that may wrap between its words (InfinibandErrors|Increasing), not inside one."""
    words = re.findall(r"[A-Z]?[^A-Z]*", name)
    out: list[Any] = []
    for word in (w for w in words if w):
        out += [html.Wbr(), word] if out else [word]
    return out


def _two_lines(content: Any, title: str | None = None) -> html.Div:
    """Cut at two lines (the whole of it on hover, where `title` gives it)."""
    return html.Div(content, className="two-lines", title=title or None)


def _muted(alert: AlertRow, silences: dict[int, Silence]) -> html.Span:
    """Which silences mute it and whose they are; why, on hover."""
    known = {s.silence_id: s for s in (silences.get(i) for i in alert.silenced_by) if s is not None}
    who = [f"#{i}" + (f" ({known[i].created_by})" if i in known else "") for i in alert.silenced_by]
    why = "; ".join(f"#{s.silence_id} by {s.created_by}: {s.comment}" for s in known.values())
    return html.Span(f"silenced by {', '.join(who)}", title=why or None, className="silenced")


def _silence_button(alert: AlertRow) -> html.Button:
    return html.Button(
        "Silence this",
        id={"type": "silence-alert", "index": alert.fingerprint},
        title="fill the silence form with this alert's labels",
        className="silence-this",
        style={"whiteSpace": "nowrap"},
    )


def silence_matchers_by_alert(rows: list[AlertRow]) -> dict[str, str]:
    """fingerprint -> the form's matchers for silencing exactly that alert."""
    return {a.fingerprint: alert_labels.matchers_text(alert_labels.identifying(a.labels)) for a in rows}


def silences_table(rows: list[Silence], writable: bool) -> Any:
    if not rows:
        return banner("No active silences.", "empty")
    body = []
    for s in rows:
        matchers = ", ".join(f"{m.name}{m.op}{m.value}" for m in s.matchers)
        button = html.Button("Expire", id={"type": "silence-expire", "index": s.silence_id}, disabled=not writable)
        body.append(
            [
                s.silence_id,
                matchers,
                s.created_by,
                s.comment or html.Span("(no reason given)", style={"color": MUTED}),
                html.Span(ago(s.created_at), title=f"{s.created_at:%Y-%m-%d %H:%M} UTC"),
                f"{s.ends_at:%Y-%m-%d %H:%M} UTC",
                button,
            ]
        )
    return table(["id", "matchers", "created by", "why", "created", "ends", ""], body, id="silences-table")


def notifications_table(rows: list[NotificationRow]) -> Any:
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
            n.http_status or "",
            n.last_error or "",
        ]
        for n in rows
    ]
    return table(
        ["queued", "receiver", "alerts", "", "outcome", "attempts", "HTTP", "last error"], body, id="notify-table"
    )


def rules_table(rows: list[RuleStatus]) -> Any:
    if not rows:
        return banner("No rule has been evaluated yet.", "empty")
    body = [
        [r.rule_group, r.alertname, ago(r.evaluated_at), f"{r.seconds * 1000:.1f}", r.instances, r.error or ""]
        for r in rows
    ]
    return table(["group", "rule", "evaluated", "ms", "alerts", "error"], body, id="rules-table")
