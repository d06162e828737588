"""Jobs (/jobs): running and recent jobs with size, GPU-hours, efficiency, a straggler flag and the GPUs
each holds idle; filtered by state, user, namespace, text, a straggler or idle GPUs, sorted by any column,
all of it in the URL (dashboard/job_view.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dash import Dash, Input, Output, State, dcc, html, no_update

from gpuscope.dashboard import time_ranges
from gpuscope.dashboard.components import MUTED, banner, guarded
from gpuscope.dashboard.context import Context
from gpuscope.dashboard.job_data import load_jobs_list
from gpuscope.dashboard.job_table import jobs_table
from gpuscope.dashboard.job_view import IDLE_WORDS, STATES, JobsView, order, pick

TITLE = "Jobs"
INLINE = {"display": "inline-block", "marginRight": "1.5em", "verticalAlign": "middle"}
FLAGS = {"straggler": "with a straggler", "idle": "holding idle GPUs"}  # JobsView's fields, as ?straggler=1


def match(pathname: str) -> dict[str, str] | None:
    return {} if pathname == "/jobs" else None


def layout(ctx: Context, search: str, **_: str) -> html.Div:
    view = JobsView.from_search(search)
    return html.Div(
        [
            html.H2("Jobs"),
            html.Div(
                [
                    dcc.RadioItems(id="jobs-state", options=list(STATES), value=view.state, inline=True, style=INLINE),
                    dcc.RadioItems(
                        id="jobs-range",
                        options=time_ranges.options(view.range_key),
                        value=view.range_key,
                        inline=True,
                        style=INLINE,
                    ),
                    dcc.Dropdown(
                        id="jobs-user",
                        options=[view.user] if view.user else [],
                        value=view.user or None,
                        placeholder="any user",
                        style={**INLINE, "width": "12em"},
                    ),
                    dcc.Dropdown(
                        id="jobs-namespace",
                        options=[view.namespace] if view.namespace else [],
                        value=view.namespace or None,
                        placeholder="any namespace",
                        style={**INLINE, "width": "12em"},
                    ),
                    dcc.Checklist(
                        id="jobs-flags",
                        options=[{"label": label, "value": key} for key, label in FLAGS.items()],
                        value=_flags(view),
                        inline=True,
                        style=INLINE,
                    ),
                    dcc.Input(
                        id="jobs-text",
                        value=view.text,
                        placeholder="job id or name",
                        debounce=True,
                        style={**INLINE, "width": "14em"},
                    ),
                    dcc.Link("clear filters", href="/jobs", id="jobs-clear", style=INLINE),
                ]
            ),
            html.Div(id="jobs-count", style={"color": MUTED, "margin": "0.4em 0"}),
            html.Div(id="jobs-table", className="output"),
        ]
    )


def register(app: Dash, ctx: Context) -> None:
    def unreachable(message: str) -> tuple[Any, ...]:
        return banner(message, "error"), "", [], []

    @app.callback(
        Output("jobs-table", "children"),
        Output("jobs-count", "children"),
        Output("jobs-user", "options"),
        Output("jobs-namespace", "options"),
        Input("refresh", "n_intervals"),
        Input("url", "search"),
    )
    @guarded(unreachable)
    def refresh(_: int | None, search: str | None) -> tuple[Any, ...]:
        view = JobsView.from_search(search)
        loaded = load_jobs_list(ctx.pool, view)
        users = sorted({*loaded.owners.users, *([view.user] if view.user else [])})
        namespaces = sorted({*loaded.owners.namespaces, *([view.namespace] if view.namespace else [])})
        shown = pick(view, loaded.jobs, loaded.stragglers, loaded.idle)
        if not shown:
            empty = "No jobs match these filters." if view.filtered else "No jobs in this range."
            if view.idle:  # the overview counts GPUs idle now; a job is flagged once they stayed idle
                empty += f" A job is flagged once its GPUs have been {IDLE_WORDS}."
            return banner(empty, "empty"), "", users, namespaces
        slowdowns = {job_id: max(s.slowdown for s in found) for job_id, found in loaded.stragglers.items()}
        count = f"{len(shown)} job{'' if len(shown) == 1 else 's'}"
        if loaded.truncated:
            count += f" (only the {len(loaded.jobs)} most recent: narrow the range or pick a user)"
        count += " · click a header to sort, a user or namespace to filter by it; hover a '-' for why it is empty"
        table = jobs_table(view, order(view, shown, slowdowns, loaded.idle), loaded.stragglers, loaded.idle)
        return table, count, users, namespaces

    @app.callback(
        Output("url", "search", allow_duplicate=True),
        Input("jobs-state", "value"),
        Input("jobs-range", "value"),
        Input("jobs-user", "value"),
        Input("jobs-namespace", "value"),
        Input("jobs-text", "value"),
        Input("jobs-flags", "value"),
        State("url", "search"),
        prevent_initial_call=True,
    )
    def share(
        state: str,
        range_key: str,
        user: str | None,
        namespace: str | None,
        text: str | None,
        flags: list[str] | None,
        search: str,
    ) -> Any:
        now = JobsView.from_search(search)
        view = replace(
            now,  # keeps the sort
            state=state,
            range_key=range_key,
            user=user or "",
            namespace=namespace or "",
            text=(text or "").strip(),
            straggler="straggler" in (flags or []),
            idle="idle" in (flags or []),
        )
        return no_update if view == now else view.search()

    @app.callback(
        Output("jobs-state", "value"),
        Output("jobs-range", "value"),
        Output("jobs-user", "value"),
        Output("jobs-namespace", "value"),
        Output("jobs-text", "value"),
        Output("jobs-flags", "value"),
        Input("url", "search"),
        State("jobs-state", "value"),
        State("jobs-range", "value"),
        State("jobs-user", "value"),
        State("jobs-namespace", "value"),
        State("jobs-text", "value"),
        State("jobs-flags", "value"),
        prevent_initial_call=True,
    )
    def follow(search: str | None, *shown: Any) -> tuple[Any, ...]:
        """The controls follow the address when a link (a user, a header, back) changed it."""
        view = JobsView.from_search(search)
        wanted = (view.state, view.range_key, view.user or None, view.namespace or None, view.text, _flags(view))
        return tuple(
            no_update if (now or None) == (want or None) else want for want, now in zip(wanted, shown, strict=True)
        )


def _flags(view: JobsView) -> list[str]:
    return [key for key in FLAGS if getattr(view, key)]
