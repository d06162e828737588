"""Pieces every page uses: the navigation bar, banners for empty and error states, tables, badges, and
a guard that turns a database outage into a clear message instead of a traceback."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

import psycopg
from dash import dcc, html
from psycopg_pool import PoolTimeout

from gpuscope.core.severity import SEVERITY_COLOURS, UNKNOWN_COLOUR

log = logging.getLogger(__name__)

NAV = (("/", "Overview"), ("/heatmap", "Heatmap"), ("/power", "Power"), ("/jobs", "Jobs"), ("/alerts", "Alerts"))


def nav() -> html.Nav:
    search = dcc.Input(
        id="nav-search",
        type="search",
        placeholder="node, job, user or GPU UUID",
        debounce=True,
        style={"marginLeft": "auto", "width": "16em"},
    )
    return html.Nav(
        [html.Strong("gpuscope", style={"marginRight": "1.5em"})]
        + [dcc.Link(label, href=href, id=f"nav-{label.lower()}", style={"marginRight": "1em"}) for href, label in NAV]
        + [search],
        style={
            "display": "flex",
            "alignItems": "center",
            "padding": "0.6em 0",
            "borderBottom": "1px solid #ddd",
            "marginBottom": "0.8em",
        },
    )


def node_href(node: str, gpu: int | str | None = None) -> str:
    """The node's page, on one of its GPUs if given."""
    return f"/node/{quote(node, safe='')}" + ("" if gpu is None else f"?gpu={quote(str(gpu), safe='')}")


def job_href(job_id: str) -> str:
    return f"/jobs/{quote(job_id, safe='')}"


def query_params(search: str | None) -> dict[str, str]:
    """The page's filters from the URL's query string (last value wins)."""
    return {key: values[-1] for key, values in parse_qs((search or "").lstrip("?")).items()}


def query_string(params: dict[str, Any]) -> str:
    return "?" + urlencode({k: v for k, v in params.items() if v not in (None, "")})


def banner(text: str, kind: str = "info") -> html.Div:
    colours = {"error": ("#fdecea", "#b71c1c"), "empty": ("#f5f5f5", "#555"), "info": ("#e3f2fd", "#0d47a1")}
    background, colour = colours.get(kind, colours["info"])
    return html.Div(
        text,
        className=f"banner banner-{kind}",
        style={
            "background": background,
            "color": colour,
            "padding": "0.6em 1em",
            "borderRadius": "4px",
            "margin": "0.5em 0",
        },
    )


def nothing() -> html.Span:
    """An output area left empty on purpose (its page says why elsewhere): rendered, not pending."""
    return html.Span(className="nothing")


def badge(severity: str) -> html.Span:
    return html.Span(
        severity or "none",
        className=f"badge badge-{severity}",
        style={
            "background": f"#{SEVERITY_COLOURS.get(severity, UNKNOWN_COLOUR):06x}",  # the chat messages' palette
            "color": "white",
            "padding": "0 0.5em",
            "borderRadius": "3px",
            "fontSize": "0.85em",
        },
    )


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], id: str | None = None) -> html.Table:
    cell = {"padding": "0.25em 0.8em", "borderBottom": "1px solid #eee", "textAlign": "left"}
    parts = [
        html.Thead(html.Tr([html.Th(h, style=cell) for h in headers])),
        html.Tbody([html.Tr([html.Td(c, style=cell) for c in row]) for row in rows]),
    ]
    style = {"borderCollapse": "collapse", "fontSize": "0.92em"}
    return html.Table(parts, id=id, style=style) if id else html.Table(parts, style=style)


def ago(t: datetime | None) -> str:
    if t is None:
        return "-"
    seconds = (datetime.now(UTC) - t).total_seconds()
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{max(seconds, 0):.0f} s ago"


def database_trouble(exc: BaseException) -> bool:
    return isinstance(exc, psycopg.OperationalError | PoolTimeout)


def guarded(on_error: Callable[[str], Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Wrap a callback: if the database is unreachable, return on_error(message) for its outputs
    (a banner, charts that say so) and log one line, rather than a traceback in the browser."""

    def wrap(callback: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(callback)
        def run(*args: Any) -> Any:
            try:
                return callback(*args)
            except Exception as exc:
                if not database_trouble(exc):
                    raise
                log.warning("dashboard: database unreachable: %s", exc)
                return on_error(f"Database unreachable ({type(exc).__name__}); retrying every few seconds.")

        return run

    return wrap


PAGE_STYLE = {"fontFamily": "system-ui, sans-serif", "margin": "0 1.5em"}
