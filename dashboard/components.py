"""Pieces every page uses: the navigation bar, banners for empty and error states, tables, badges, and
a guard that turns a database outage into a clear message instead of a traceback.

They are Mantine components (dash-mantine-components): one design system whose CSS and JavaScript ship
inside the Python package, so the dashboard looks the same on an air-gapped cluster, with light and dark
colour schemes built in. Colours are Mantine's CSS variables, never fixed greys, so both schemes read."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

import dash_mantine_components as dmc
import psycopg
from dash import dcc, html, no_update
from psycopg_pool import PoolTimeout

from gpuscope.core.severity import SEVERITY_COLOURS, UNKNOWN_COLOUR

log = logging.getLogger(__name__)

NAV = (
    ("/", "Overview"),
    ("/heatmap", "Heatmap"),
    ("/power", "Power"),
    ("/jobs", "Jobs"),
    ("/health", "Health"),
    ("/reports", "Reports"),
    ("/alerts", "Alerts"),
)


# Mantine's CSS variables: each has a value in the light and in the dark scheme.
MUTED = "var(--mantine-color-dimmed)"
BORDER = "var(--mantine-color-default-border)"
ERROR_TEXT = "var(--mantine-color-error)"


def nav() -> html.Nav:
    search = dcc.Input(
        id="nav-search",
        type="search",
        placeholder="node, job, user or GPU UUID",
        debounce=True,
        className="nav-search",
    )
    scheme = dmc.Switch(
        id="colour-scheme",
        label="dark",
        size="sm",
        checked=False,
        persistence=True,  # the browser remembers the operator's choice across visits
        persistence_type="local",
        className="scheme-switch",
    )
    return html.Nav(
        [html.Strong("gpuscope", className="brand")]
        + [dcc.Link(label, href=href, id=f"nav-{label.lower()}", className="nav-link") for href, label in NAV]
        + [search, scheme],
        className="nav",
    )


def node_href(node: str, gpu: int | str | None = None) -> str:
    """The node's page, on one of its GPUs if given."""
    return f"/node/{quote(node, safe='')}" + ("" if gpu is None else f"?gpu={quote(str(gpu), safe='')}")


def rack_href(rack: str, range_key: str | None = None) -> str:
    """The power page on one rack ("cluster/rack"): its nodes and the jobs on them."""
    return "/power" + query_string({"rack": rack, "range": range_key})


def job_href(job_id: str) -> str:
    return f"/jobs/{quote(job_id, safe='')}"


def query_params(search: str | None) -> dict[str, str]:
    """The page's filters from the URL's query string (last value wins)."""
    return {key: values[-1] for key, values in parse_qs((search or "").lstrip("?")).items()}


def query_string(params: dict[str, Any]) -> str:
    return "?" + urlencode({k: v for k, v in params.items() if v not in (None, "")})


def address_for(search: str | None, wanted: dict[str, Any], defaults: dict[str, Any]) -> Any:
    """The query string a page's controls ask for, or no_update where the address already says it (with
    the page's defaults filled in). Dash runs a new page's share callbacks once with the values its layout
    drew from the address, prevent_initial_call or not: writing the address then is a no-op at best, and
    at worst lands after a newer navigation (the search box's) and undoes it."""
    said = {**{k: str(v) for k, v in defaults.items()}, **query_params(search)}
    if all(said.get(k, "") == ("" if v is None else str(v)) for k, v in wanted.items()):
        return no_update
    return query_string(wanted)


BANNER_COLOURS = {"error": "red", "empty": "gray", "info": "blue"}


def banner(text: str, kind: str = "info") -> dmc.Alert:
    return dmc.Alert(text, color=BANNER_COLOURS.get(kind, "blue"), variant="light", className=f"banner banner-{kind}")


def nothing() -> html.Span:
    """An output area left empty on purpose (its page says why elsewhere): rendered, not pending."""
    return html.Span(className="nothing")


def badge(severity: str) -> dmc.Badge:
    return dmc.Badge(
        severity or "none",
        color=f"#{SEVERITY_COLOURS.get(severity, UNKNOWN_COLOUR):06x}",  # the chat messages' palette
        variant="filled",
        size="sm",
        radius="sm",
        className=f"badge badge-{severity}",
    )


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], id: str | None = None) -> dmc.Table:
    parts = [
        html.Thead(html.Tr([html.Th(h) for h in headers])),
        html.Tbody([html.Tr([html.Td(c) for c in row]) for row in rows]),
    ]
    return styled_table(parts, id)


def styled_table(parts: list[Any], id: str | None = None) -> dmc.Table:
    """Every table's look: compact rows, a line between them, the hovered row lit."""
    options: dict[str, Any] = {"highlightOnHover": True, "verticalSpacing": 4, "fz": "sm", "className": "table"}
    return dmc.Table(parts, id=id, **options) if id else dmc.Table(parts, **options)


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
