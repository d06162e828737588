"""Builds the Dash app: a navigation bar, a router from the URL to one page module, a shared refresh
timer. Pages keep their filters in the URL, so a view can be shared by copying the address."""

from __future__ import annotations

from typing import Any

import dash_mantine_components as dmc
from dash import Dash, Input, Output, State, clientside_callback, dcc, html
from psycopg_pool import ConnectionPool

from gpuscope.dashboard.auth import protect
from gpuscope.dashboard.body_limit import limit_bodies
from gpuscope.dashboard.components import banner, nav
from gpuscope.dashboard.context import Context, DashboardOptions
from gpuscope.dashboard.pages import PAGES
from gpuscope.dashboard.pages.overview import prefetch_on_page_request

THEME = {"primaryColor": "indigo", "fontFamily": "system-ui, sans-serif", "defaultRadius": "sm"}


def create_app(
    pool: ConnectionPool[Any], options: DashboardOptions | None = None, users: dict[str, str] | None = None
) -> Dash:
    ctx = Context(pool, options or DashboardOptions())
    app = Dash(__name__, title="gpuscope", update_title="", suppress_callback_exceptions=True)
    app.layout = dmc.MantineProvider(
        html.Div(
            [
                dcc.Location(id="url", refresh=False),
                nav(),
                html.Div(id="page"),
                dcc.Interval(id="refresh", interval=ctx.options.refresh_ms),
                # Loads dcc.Markdown's code (and its highlighter, which it fetches after its first
                # mount and then draws again) with the page, so tables drawn as Markdown
                # (dashboard/html_table.py) arrive once, not twice.
                dcc.Markdown(id="markdown-preload", style={"display": "none"}),
            ],
            className="shell",
        ),
        id="mantine",
        theme=THEME,
        forceColorScheme="light",
    )
    # In the browser alone: a switch of scheme costs no request and redraws no figure (figures are
    # transparent; their text and grid take the scheme's colours from gpuscope.css).
    clientside_callback(
        "function (dark) { return dark ? 'dark' : 'light'; }",
        Output("mantine", "forceColorScheme"),
        Input("colour-scheme", "checked"),
    )

    @app.callback(Output("page", "children"), Input("url", "pathname"), State("url", "search"))
    def route(pathname: str | None, search: str | None) -> Any:
        for page in PAGES:
            parts = page.match(pathname or "/")
            if parts is not None:
                return page.layout(ctx, search or "", **parts)
        return html.Div([html.H2("Not found"), banner(f"No page at {pathname}.", "empty")])

    for page in PAGES:
        page.register(app, ctx)
    limit_bodies(app.server, ctx.options.max_body_bytes)  # first: an oversized body costs no password hash
    if users:
        protect(app.server, users)
    prefetch_on_page_request(app, ctx)  # after protect(): only a request that passed the login starts it
    return app
