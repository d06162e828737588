"""One job (/jobs/<id>): who ran it, how well it used its GPUs (GPU-hours, activity, idle share, energy, peak
memory, stragglers: dashboard/job_summary.py), its nodes and GPUs linked to their pages, its own GPU
heatmap with each straggler marked from its onset to its end, the cause, the evidence and the estimated
slowdown. The header and the summary come from one read, so they say the same GPU-hours. A job the
store does not know gets one message and the way back."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

from dash import Dash, Input, Output, State, dcc, html

from gpuscope.collector import query
from gpuscope.dashboard import data, job_gaps
from gpuscope.dashboard.components import ago, banner, guarded, node_href, nothing, query_params, table
from gpuscope.dashboard.context import Context
from gpuscope.dashboard.figures import METRICS, Mark, heatmap_figure, message_figure
from gpuscope.dashboard.job_data import job_known, load_job_efficiency
from gpuscope.dashboard.job_gaps import gap
from gpuscope.dashboard.job_summary import efficiency, gpu_table
from gpuscope.dashboard.job_table import gpu_hours
from gpuscope.dashboard.not_found import not_found

TITLE = "Job"
JOB_METRICS = ("tensor_active_pct", "sm_active_pct", "util_pct", "power_w", "temp_c")
# The summary reads the job's whole life (its idle minutes, its energy): once a minute, not every refresh.
EFFICIENCY_EVERY_MS = 60_000


def match(pathname: str) -> dict[str, str] | None:
    if pathname.startswith("/jobs/") and len(pathname) > len("/jobs/"):
        return {"job_id": unquote(pathname[len("/jobs/") :])}
    return None


def layout(ctx: Context, search: str, job_id: str = "", **_: str) -> html.Div:
    # Unreachable database: the page as usual, whose callbacks say so.
    if not guarded(lambda _message: True)(job_known)(ctx.pool, job_id):
        message = f"No job {job_id!r} in the telemetry: no GPU was ever allocated to it (or it is past retention)."
        return not_found(f"Job {job_id}", message, "/jobs", "all jobs")
    params = query_params(search)
    metric = params.get("metric") if params.get("metric") in JOB_METRICS else "tensor_active_pct"
    return html.Div(
        [
            html.H2(f"Job {job_id}", id="job-title"),
            dcc.Store(id="job-id", data=job_id),
            html.Div(id="job-summary", className="output"),
            html.Div(id="job-efficiency", className="output"),
            dcc.Interval(id="job-efficiency-refresh", interval=max(EFFICIENCY_EVERY_MS, ctx.options.refresh_ms)),
            html.Div(id="job-mig", className="output"),
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
            html.Div(id="job-gpus", className="output"),
        ]
    )


def register(app: Dash, ctx: Context) -> None:
    def unreachable(message: str) -> tuple[Any, ...]:
        return nothing(), message_figure(message), banner(message, "error")

    @app.callback(
        Output("job-summary", "children"),
        Output("job-efficiency", "children"),
        Output("job-gpus", "children"),
        Input("job-efficiency-refresh", "n_intervals"),
        State("job-id", "data"),
    )
    @guarded(lambda message: (banner(message, "error"), nothing(), nothing()))
    def summarise(_: int | None, job_id: str) -> tuple[Any, Any, Any]:
        # One read for the header and the summary: each figure computed once, the same in both.
        loaded = load_job_efficiency(ctx.pool, job_id)
        if loaded is None:  # gone since the page opened (retention)
            return banner(f"No job {job_id!r} in the store any more.", "empty"), nothing(), nothing()
        return header(loaded.job), efficiency(loaded), gpu_table(loaded.gpus, loaded.thermals)

    @app.callback(
        Output("job-mig", "children"),
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
            return nothing(), message_figure(f"No job {job_id!r} in the store."), nothing()
        marks = []
        for straggler in loaded.stragglers:
            for index, row in enumerate(loaded.grid.rows):
                if row.node == straggler.node and (straggler.gpu is None or row.gpu == straggler.gpu):
                    state = "now" if straggler.ended_at is None else f"ended {ago(straggler.ended_at)}"
                    words = f"straggler: {straggler.cause}, ~{straggler.slowdown:.0%} slower ({state})"
                    # From its onset to its end, or to now while it lasts: not the job's whole row.
                    marks.append(Mark(index, words, straggler.started_at, straggler.ended_at))
        figure = heatmap_figure(loaded.grid, revision=f"job-{job_id}-{metric}", marks=marks)
        return _mig_devices(loaded.mig), figure, _stragglers(loaded.stragglers)


def header(job: query.JobRow) -> html.P:
    """Who ran it, on what, when, and its GPU-hours."""
    owner: list[Any] = ["user ", job.user or gap(job_gaps.NO_USER)]
    if job.namespace:  # Kubernetes: whose pods these are
        pods = ", ".join(job.pods or [])
        workload = job.workload or gap(job_gaps.NO_WORKLOAD)
        owner = ["namespace ", job.namespace, " · ", workload, " · pods ", pods or gap(job_gaps.NO_PODS)]
    held = _count(job.gpus, "GPU")
    if job.mig_devices:  # slices of GPUs, not the GPUs
        held = f"{_count(job.mig_devices, 'MIG device')} of {_count(job.gpus, 'GPU')}"
    return html.P(
        [
            *owner,
            f" · {held} on {_count(len(job.nodes), 'node')} · "
            f"{'running since' if job.running else 'ran from'} {job.started_at:%Y-%m-%d %H:%M} UTC"
            f"{'' if job.running else f' to {job.ended_at:%H:%M}'} · {gpu_hours(job.gpu_hours)} GPU-hours",
        ]
    )


def _mig_devices(held: list[Any]) -> Any:
    """A job on MIG slices: each slice with its own activity (the heatmap below is of whole GPUs, which
    the slices share with other jobs)."""
    if not held:
        return nothing()
    rows = [
        [
            h.gpu.node,
            h.gpu.gpu_index,
            f"{h.mig.gpu_instance_id}/{h.mig.compute_instance_id}",
            h.mig.profile,
            f"{h.mig.slices}/{h.mig.gpu_slices}",
            h.pod or "-",
            _percent(h.usage.mean_sm_active_pct),
            _percent(h.usage.mean_tensor_active_pct),
            f"{h.started_at:%Y-%m-%d %H:%M}",
            "running" if h.ended_at is None else f"{h.ended_at:%Y-%m-%d %H:%M}",
        ]
        for h in held
    ]
    header = ["node", "GPU", "instance (GI/CI)", "profile", "share of GPU", "pod", "SM active", "tensor active"]
    return html.Div(
        [
            html.H3("MIG devices"),
            html.P("Each slice's own activity; the heatmap shows the whole GPUs, shared with other slices' jobs."),
            table([*header, "from", "until"], rows, id="job-mig-table"),
        ]
    )


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


# The detector's evidence (stragglers/detector.py) in an operator's words; each value a fraction or ratio.
EVIDENCE_WORDS = {
    "job_slowdown": lambda v: f"job {v:.0%} slower than its normal",
    "traffic_slowdown": lambda v: f"its network traffic {v:.0%} slower, agreeing",
    "share_rise": lambda v: f"this GPU's activity {v:.0%} over its share (it computes while the others wait)",
    "clock_ratio": lambda v: f"SM clock {v:.0%} of its peers' median",
    "link_drop": lambda v: f"link rate down {v:.0%}",
    "link_gbps": lambda v: f"link at {v:.0f} Gbit/s",
    "xmit_wait_ratio": lambda v: f"transmit waits {v:.1f}x their normal while its peers' are not",
    "util_drop": lambda v: f"node utilisation down {v:.0%} against its peers'",
    "busy_rise": lambda v: f"this GPU busy {v:.0%} longer than its share for no more work (stalls)",
    "power_rise": lambda v: f"its share of the job's power {v:+.0%}: no more work done",
    "nvlink_errors_per_s": lambda v: f"NVLink replays, recoveries and CRC errors at {v:.1f}/s",
    "ports_congested": lambda v: f"transmit waits up on {v:.0f} ports at once",
    "ports_wait_ratio": lambda v: f"waits {v:.1f}x their normal there (median)",
    "aggressor_traffic_rise": lambda v: f"the job on shared nodes sending {v:.0%} more since",
}


def evidence_words(evidence: dict[str, Any]) -> str:
    words = [EVIDENCE_WORDS[k](v) for k, v in evidence.items() if k in EVIDENCE_WORDS and isinstance(v, int | float)]
    others = {k: v for k, v in evidence.items() if k not in EVIDENCE_WORDS}  # a newer detector's: as it is
    return "; ".join(words + ([json.dumps(others, sort_keys=True)[:200]] if others else []))


def _stragglers(found: list[Any]) -> Any:
    if not found:
        return banner("No straggler found in this job.", "empty")
    rows = [
        [
            s.culprit if s.node is None else dcc.Link(s.node, href=node_href(s.node)),
            "-" if s.gpu is None or s.node is None else dcc.Link(f"GPU {s.gpu}", href=node_href(s.node, s.gpu)),
            "-" if s.nic is None else f"{s.nic}/{s.port}",
            s.cause,
            f"{s.slowdown:.0%}",
            f"{s.gpu_hours_lost:.1f}",
            f"{s.started_at:%H:%M:%S}",
            "active" if s.ended_at is None else f"{s.ended_at:%H:%M:%S}",
            evidence_words(s.evidence),
        ]
        for s in found
    ]
    header = ["node", "GPU", "NIC port", "cause", "est. slowdown", "GPU-h lost", "started", "ended", "evidence"]
    total = sum(s.gpu_hours_lost for s in found)
    cost = html.P(f"Stragglers cost this job {total:.1f} GPU-hours: the time beyond its normal pace, on all its GPUs.")
    return html.Div([cost, table(header, rows, id="straggler-table")])
