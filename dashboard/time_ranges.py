"""The time ranges a page can show: the last 15 minutes to 7 days, or any span of the stored history
("2026-11-20T08:00..2026-11-21T08:00", UTC, as the URL carries it, so a view of an incident can be
shared), and the control that picks one: the presets, and FROM and TO fields for a custom span. The
grammar is the read API's too (`range=`): it lives in collector/query/range_keys.py."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from dash import Dash, Input, Output, State, dcc, html, no_update

from gpuscope.collector import query
from gpuscope.collector.query.range_keys import EXAMPLE, PRESETS_S, custom, parse_range
from gpuscope.collector.query.range_keys import moment as _moment
from gpuscope.dashboard.components import ERROR_TEXT

MAX_SPAN = timedelta(days=92)  # a quarter: the hour rollup answers it in a few hundred columns


def parse(key: str, now: datetime | None = None) -> query.TimeRange:
    """A preset ("6h") or a custom span ("2026-11-20T08:00..2026-11-21T08:00", UTC); ValueError in words."""
    return parse_range(key, MAX_SPAN, now)


def valid(key: str | None) -> bool:
    try:
        parse(key or "")
    except ValueError:
        return False
    return True


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
