"""One job (/jobs/<id>): its own GPU heatmap with the straggler marked, the cause, the evidence and the
estimated slowdown."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

from dash import Dash, Input, Output, State, dcc, html

from gpuscope.dashboard import data
from gpuscope.dashboard.components import ago, banner, guarded, nothing, query_params, table
from gpuscope.dashboard.context import Context
from gpuscope.dashboard.figures import METRICS, Mark, heatmap_figure, message_figure

TITLE = "Job"
JOB_METRICS = ("tensor_active_pct", "sm_active_pct", "util_pct", "power_w", "temp_c")


def match(pathname: str) -> dict[str, str] | None:
    if pathname.startswith("/jobs/") and len(pathname) > len("/jobs/"):
        return {"job_id": unquote(pathname[len("/jobs/") :])}
    return None


def layout(ctx: Context, search: str, job_id: str = "", **_: str) -> html.Div:
    params = query_params(search)
    metric = params.get("metric") if params.get("metric") in JOB_METRICS else "tensor_active_pct"
    return html.Div(
        [
            html.H2(f"Job {job_id}", id="job-title"),
            dcc.Store(id="job-id", data=job_id),
            html.Div(id="job-summary", className="output"),
            dcc.Dropdown(
                id="job-metric",
                options=[{"label": METRICS[m], "value": m} for m in JOB_METRICS],
                value=metric,
                clearable=False,
                style={"width": "18em"},
            ),
            dcc.Graph(id="job-heatmap", config={"displaylogo": False}),
            html.H3("Stragglers"),
            html.Div(id="job-stragglers", className="output"),
        ]
    )


def register(app: Dash, ctx: Context) -> None:
    def unreachable(message: str) -> tuple[Any, ...]:
        return banner(message, "error"), message_figure(message), nothing()

    @app.callback(
        Output("job-summary", "children"),
        Output("job-heatmap", "figure"),
        Output("job-stragglers", "children"),
        Input("refresh", "n_intervals"),
        Input("job-metric", "value"),
        State("job-id", "data"),
    )
    @guarded(unreachable)
    def refresh(_: int | None, metric: str, job_id: str) -> tuple[Any, ...]:
        loaded = data.load_job(ctx.pool, job_id, metric, "6h")
        if loaded.job is None:
            message = f"No job {job_id!r} in the store."
            return banner(message, "empty"), message_figure(message), nothing()
        job = loaded.job
        owner = f"user {job.user or '-'}"
        if job.namespace:  # Kubernetes: whose pods these are
            pods = ", ".join(job.pods or [])
            owner = f"namespace {job.namespace} · {job.workload or '-'} · pods {pods or '-'}"
        summary = (
            f"{owner} · {job.gpus} GPUs on {len(job.nodes)} nodes · "
            f"{'running since' if job.running else 'ran from'} {job.started_at:%Y-%m-%d %H:%M} UTC"
            f"{'' if job.running else f' to {job.ended_at:%H:%M}'} · {job.gpu_hours:.1f} GPU-hours"
        )
        marks = []
        for straggler in loaded.stragglers:
            for index, row in enumerate(loaded.grid.rows):
                if row.node == straggler.node and (straggler.gpu is None or row.gpu == straggler.gpu):
                    state = "now" if straggler.ended_at is None else f"ended {ago(straggler.ended_at)}"
                    marks.append(
                        Mark(index, f"straggler: {straggler.cause}, ~{straggler.slowdown:.0%} slower ({state})")
                    )
        figure = heatmap_figure(loaded.grid, revision=f"job-{job_id}-{metric}", marks=marks)
        return html.P(summary), figure, _stragglers(loaded.stragglers)


def _stragglers(found: list[Any]) -> Any:
    if not found:
        return banner("No straggler found in this job.", "empty")
    rows = [
        [
            s.node,
            "-" if s.gpu is None else s.gpu,
            "-" if s.nic is None else f"{s.nic}/{s.port}",
            s.cause,
            f"{s.slowdown:.0%}",
            f"{s.started_at:%H:%M:%S}",
            "active" if s.ended_at is None else f"{s.ended_at:%H:%M:%S}",
            html.Code(json.dumps(s.evidence, sort_keys=True)[:300]),
        ]
        for s in found
    ]
    header = ["node", "GPU", "NIC port", "cause", "est. slowdown", "started", "ended", "evidence"]
    return table(header, rows, id="straggler-table")
