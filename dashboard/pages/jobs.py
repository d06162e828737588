"""Jobs (/jobs): running and recent jobs with size, GPU-hours, efficiency and a straggler flag."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from dash import Dash, Input, Output, dcc, html

from gpuscope.dashboard import data
from gpuscope.dashboard.components import ago, banner, guarded, query_params, query_string, table
from gpuscope.dashboard.context import Context

TITLE = "Jobs"
STATES = {"running": "running", "all": "running and recent", "finished": "finished"}


def match(pathname: str) -> dict[str, str] | None:
    return {} if pathname == "/jobs" else None


def layout(ctx: Context, search: str, **_: str) -> html.Div:
    params = query_params(search)
    state = params.get("state") if params.get("state") in STATES else "all"
    range_key = params.get("range") if params.get("range") in data.RANGES_S else "24h"
    return html.Div(
        [
            html.H2("Jobs"),
            dcc.RadioItems(
                id="jobs-state",
                options=[{"label": v, "value": k} for k, v in STATES.items()],
                value=state,
                inline=True,
                style={"display": "inline-block", "marginRight": "2em"},
            ),
            dcc.RadioItems(
                id="jobs-range",
                options=list(data.RANGES_S),
                value=range_key,
                inline=True,
                style={"display": "inline-block"},
            ),
            html.Div(id="jobs-table", className="output"),
        ]
    )


def register(app: Dash, ctx: Context) -> None:
    @app.callback(
        Output("jobs-table", "children"),
        Input("refresh", "n_intervals"),
        Input("jobs-state", "value"),
        Input("jobs-range", "value"),
    )
    @guarded(lambda message: banner(message, "error"))
    def refresh(_: int | None, state: str, range_key: str) -> Any:
        loaded = data.load_jobs(ctx.pool, state, range_key)
        if not loaded.jobs:
            return banner("No jobs in this range.", "empty")
        kubernetes = any(job.namespace for job in loaded.jobs)  # the pods' columns only where there are pods
        rows = []
        for job in loaded.jobs:
            flag: Any = "-"
            if found := loaded.stragglers.get(job.job_id):
                worst = max(found, key=lambda s: s.slowdown)
                active = " (now)" if worst.ended_at is None else ""
                flag = html.Span(
                    f"⚠ straggler{active}: {worst.culprit}, {worst.cause}, ~{worst.slowdown:.0%}",
                    className="straggler-flag",
                    style={"color": "#d32f2f"},
                )
            usage = job.usage
            rows.append(
                [
                    dcc.Link(job.job_id, href=f"/jobs/{quote(job.job_id, safe='')}"),
                    job.user or "-",
                    *([job.namespace or "-", job.workload or "-"] if kubernetes else []),
                    "running" if job.running else f"ended {ago(job.ended_at)}",
                    len(job.nodes),
                    job.gpus,
                    f"{job.gpu_hours:.1f}",
                    _pct(usage.mean_util_pct),
                    _pct(usage.mean_tensor_active_pct),
                    flag,
                ]
            )
        headers = ["job", "user", *(["namespace", "workload"] if kubernetes else [])]
        headers += ["state", "nodes", "GPUs", "GPU-hours", "mean util", "tensor active", "straggler"]
        return table(headers, rows, id="jobs")

    @app.callback(
        Output("url", "search", allow_duplicate=True),
        Input("jobs-state", "value"),
        Input("jobs-range", "value"),
        prevent_initial_call=True,
    )
    def share(state: str, range_key: str) -> str:
        return query_string({"state": state, "range": range_key})


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"
