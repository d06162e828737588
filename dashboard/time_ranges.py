"""The time ranges a page can show: the last 15 minutes to 7 days, or any span of the stored history
("2026-11-20T08:00..2026-11-21T08:00", UTC, as the URL carries it, so a view of an incident can be
shared), and the control that picks one: the presets, and FROM and TO fields for a custom span."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from dash import Dash, Input, Output, State, dcc, html, no_update

from gpuscope.collector import query
from gpuscope.dashboard.components import ERROR_TEXT

PRESETS_S = {"15m": 15 * 60, "1h": 3600, "6h": 6 * 3600, "24h": 24 * 3600, "7d": 7 * 86400}
SEPARATOR = ".."
MAX_SPAN = timedelta(days=92)  # a quarter: the hour rollup answers it in a few hundred columns
FORMAT = "%Y-%m-%dT%H:%M"
EXAMPLE = "2026-11-20 08:00"


def parse(key: str, now: datetime | None = None) -> query.TimeRange:
    """A preset ("6h") or a custom span ("2026-11-20T08:00..2026-11-21T08:00", UTC); ValueError in words."""
    if key in PRESETS_S:
        return query.last(PRESETS_S[key], now)
    start_text, separator, end_text = key.partition(SEPARATOR)
    if not separator:
        raise ValueError(f"unknown range {key!r}: one of {', '.join(PRESETS_S)}, or FROM..TO in UTC")
    start, end = _moment(start_text), _moment(end_text)
    if end <= start:
        raise ValueError(f"the range must end after it starts: {start:%Y-%m-%d %H:%M} is not before {end:%H:%M}")
    if end - start > MAX_SPAN:
        raise ValueError(f"a range can span at most {MAX_SPAN.days} days")
    return query.TimeRange(start, end)


def valid(key: str | None) -> bool:
    try:
        parse(key or "")
    except ValueError:
        return False
    return True


def custom(start: datetime, end: datetime) -> str:
    return f"{start.astimezone(UTC):{FORMAT}}{SEPARATOR}{end.astimezone(UTC):{FORMAT}}"


def label(key: str) -> str:
    if key in PRESETS_S:
        return key
    window = parse(key)
    same_day = window.start.date() == window.end.date()
    return f"{window.start:%Y-%m-%d %H:%M} to {window.end:{'%H:%M' if same_day else '%Y-%m-%d %H:%M'}} UTC"


def options(key: str) -> list[dict[str, str]]:
    chosen = [{"label": label(key), "value": key}] if key not in PRESETS_S and valid(key) else []
    return [{"label": preset, "value": preset} for preset in PRESETS_S] + chosen


def picker(component_id: str, key: str) -> html.Div:
    """The presets as radio items (id `component_id`, value the range key), then FROM and TO fields and
    a button that makes a custom span the value. Register its callback once with `register`."""
    field = {"marginLeft": "0.6em", "fontSize": "0.9em"}
    moment = {**field, "width": "10em", "flex": "0 0 auto"}
    return html.Div(
        [
            dcc.RadioItems(id=component_id, options=options(key), value=key, inline=True),
            html.Span("or from", style=field),
            dcc.Input(id=f"{component_id}-from", type="text", placeholder=EXAMPLE, size="16", style=moment),
            html.Span("to", style=field),
            dcc.Input(id=f"{component_id}-to", type="text", placeholder=EXAMPLE, size="16", style=moment),
            html.Span(" UTC", style={"fontSize": "0.9em"}),
            html.Button("show", id=f"{component_id}-apply", n_clicks=0, style=field),
            html.Span(id=f"{component_id}-error", className="range-error", style={**field, "color": ERROR_TEXT}),
        ],
        className="range-picker",
        style={"display": "flex", "flexWrap": "wrap", "alignItems": "center", "gap": "0.2em", "margin": "0.4em 0"},
    )


def register(app: Dash, component_id: str) -> None:
    @app.callback(
        Output(component_id, "options"),
        Output(component_id, "value"),
        Output(f"{component_id}-error", "children"),
        Input(f"{component_id}-apply", "n_clicks"),
        State(f"{component_id}-from", "value"),
        State(f"{component_id}-to", "value"),
        prevent_initial_call=True,
    )
    def apply(_: int, start: str | None, end: str | None) -> tuple[Any, Any, str]:
        if not start or not end:
            return no_update, no_update, "give both a start and an end"
        try:
            key = custom(_moment(start), _moment(end))
            parse(key)
        except ValueError as exc:
            return no_update, no_update, str(exc)
        return options(key), key, ""


def _moment(text: str) -> datetime:
    """ "2026-11-20 08:00" or "2026-11-20T08:00" (seconds and an offset optional; none means UTC) as UTC."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"not a date and time: {text!r} (expected like {EXAMPLE})") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
