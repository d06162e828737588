"""Search (/search?q=...): nodes, GPUs (by UUID), jobs and users whose names hold the text, each a link;
the navigation bar's box comes here, or straight to the one node or job it found."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from dash import Dash, Input, Output, State, dcc, html, no_update

from gpuscope.dashboard.components import (
    ago,
    banner,
    guarded,
    job_href,
    node_href,
    query_params,
    query_string,
    table,
)
from gpuscope.dashboard.context import Context
from gpuscope.dashboard.search_data import load_found

TITLE = "Search"
MAX_TEXT = 200  # longer is not a name anyone types


def match(pathname: str) -> dict[str, str] | None:
    return {} if pathname == "/search" else None


def layout(ctx: Context, search: str, **_: str) -> html.Div:
    text = query_params(search).get("q", "").strip()[:MAX_TEXT]
    if not text:
        return html.Div([html.H2("Search"), banner("Type a node, job, user or GPU UUID in the box above.", "empty")])
    return html.Div([html.H2(f"Search: {text}"), html.Div(_results(ctx, text), id="search-results")])


@guarded(lambda message: banner(message, "error"))
def _results(ctx: Context, text: str) -> Any:
    found = load_found(ctx.pool, text)
    parts: list[Any] = []
    if found.nodes:
        rows = [[dcc.Link(node, href=node_href(node)), rack, cluster] for cluster, rack, node in found.nodes]
        parts += [html.H3("Nodes"), table(["node", "rack", "cluster"], rows, id="search-nodes")]
    if found.gpus:
        rows = [[dcc.Link(f"{node} GPU {gpu}", href=node_href(node, gpu)), uuid] for node, gpu, uuid in found.gpus]
        parts += [html.H3("GPUs"), table(["GPU", "UUID"], rows, id="search-gpus")]
    if found.jobs:
        rows = [
            [dcc.Link(job, href=job_href(job)), owner or "-", "running" if running else "ended", ago(started)]
            for job, owner, started, running in found.jobs
        ]
        parts += [html.H3("Jobs"), table(["job", "user", "state", "started"], rows, id="search-jobs")]
    if found.users:
        rows = [[dcc.Link(user, href=f"/jobs?state=all&user={quote(user)}"), running] for user, running in found.users]
        parts += [html.H3("Users"), table(["user", "jobs running"], rows, id="search-users")]
    return parts or banner(f"Nothing named like {text!r}: no node, GPU, job or user.", "empty")


def register(app: Dash, ctx: Context) -> None:
    @app.callback(
        Output("url", "pathname", allow_duplicate=True),
        Output("url", "search", allow_duplicate=True),
        Output("nav-search", "value"),
        Input("nav-search", "n_submit"),
        State("nav-search", "value"),
        prevent_initial_call=True,
    )
    def go(_: int | None, text: str | None) -> tuple[Any, Any, Any]:
        text = (text or "").strip()[:MAX_TEXT]
        if not text:
            return no_update, no_update, no_update
        try:
            only = load_found(ctx.pool, text).only_target()
        except Exception:  # the results page says what went wrong
            only = None
        if only is not None:
            kind, name = only
            return (node_href(name) if kind == "node" else job_href(name)), "", ""
        return "/search", query_string({"q": text}), ""
