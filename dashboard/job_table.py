"""The jobs list as a table: headers that sort (links to the same view sorted, so the order is in the
URL too), each job linked to its page, its user and namespace linked to the list filtered by them, and a
reason on every "-"."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dash import dcc, html

from gpuscope.collector import query
from gpuscope.dashboard import job_gaps
from gpuscope.dashboard.components import MUTED, ago, job_href, styled_table
from gpuscope.dashboard.job_gaps import gap
from gpuscope.dashboard.job_view import COLUMNS, Column, JobsView

CELL = {"textAlign": "left"}
NUMBER = {**CELL, "textAlign": "right"}
NUMERIC = {"nodes", "gpus", "gpu_hours", "util", "sm", "tensor"}
ONE_LINE = {"started", "state"}


def gpu_hours(hours: float) -> str:
    """GPU-hours to a tenth; a young or small job's to a hundredth, not a bare 0.0."""
    return f"{hours:.2f}" if hours < 1 else f"{hours:.1f}"


def jobs_table(view: JobsView, jobs: list[query.JobRow], stragglers: dict[str, list[query.StragglerRow]]) -> Any:
    """The table, and under it the legend of its "-" cells."""
    kubernetes = any(job.namespace for job in jobs)  # the pods' columns only where there are pods
    columns = [c for c in COLUMNS if kubernetes or c.key not in ("namespace", "workload")]
    reasons: list[str] = []
    header = html.Tr([html.Th(_sort_link(view, c), title=c.explains, style=_style(c)) for c in columns])
    body = [
        html.Tr(
            [
                html.Td(_cell(c.key, job, view, stragglers.get(job.job_id, []), reasons), style=_style(c))
                for c in columns
            ]
        )
        for job in jobs
    ]
    table = styled_table([html.Thead(header), html.Tbody(body)], id="jobs")
    return [table, job_gaps.legend(reasons)]


def _style(column: Column) -> dict[str, str]:
    if column.key in ONE_LINE:
        return {**CELL, "whiteSpace": "nowrap"}
    return NUMBER if column.key in NUMERIC else CELL


def _sort_link(view: JobsView, column: Column) -> Any:
    arrow = ""
    if view.sort_key == column.key:
        arrow = " ▼" if view.descending else " ▲"
    return dcc.Link(
        column.header + arrow,
        href="/jobs" + view.sorted_by(column.key).search(),
        className="sort-link",
        style={"color": "inherit", "textDecoration": "none"},
    )


def _cell(key: str, job: query.JobRow, view: JobsView, found: list[query.StragglerRow], reasons: list[str]) -> Any:
    def missing(reason: str) -> html.Span:
        reasons.append(reason)
        return gap(reason)

    usage = job.usage
    match key:
        case "job":
            return dcc.Link(job.job_id, href=job_href(job.job_id))
        case "user":
            if not job.user:
                return missing(job_gaps.why_no_user(job))
            return _filter_link(job.user, replace(view, user=job.user), f"only {job.user}'s jobs")
        case "namespace":
            if not job.namespace:
                return missing(job_gaps.NOT_KUBERNETES)
            return _filter_link(job.namespace, replace(view, namespace=job.namespace), "only this namespace's jobs")
        case "workload":
            if not job.workload:
                return missing(job_gaps.NO_WORKLOAD if job.namespace else job_gaps.NOT_KUBERNETES)
            return job.workload
        case "state":
            if job.running:
                return html.Span("running", title=f"since {job.started_at:%Y-%m-%d %H:%M:%S} UTC")
            assert job.ended_at is not None  # a job that is not running has ended
            return html.Span(f"ended {ago(job.ended_at)}", title=f"ended {job.ended_at:%Y-%m-%d %H:%M:%S} UTC")
        case "nodes":
            return html.Span(str(len(job.nodes)), title=", ".join(job.nodes))
        case "gpus":
            slices = f"; {job.mig_devices} of them as MIG devices" if job.mig_devices else ""
            return html.Span(str(job.gpus), title=f"{job.gpus} GPUs{slices}")
        case "gpu_hours":
            return gpu_hours(job.gpu_hours)
        case "util" | "sm" | "tensor":
            value = {"util": usage.mean_util_pct, "sm": usage.mean_sm_active_pct}.get(key, usage.mean_tensor_active_pct)
            if value is None:
                metric = {"sm": "sm_active"}.get(key, key)
                return missing(job_gaps.why_no_usage(usage, metric, job.started_at, job.mig_devices > 0))
            return f"{value:.0f}"
        case "started":
            return f"{job.started_at:%Y-%m-%d %H:%M}"
        case "straggler":
            return _straggler(job, found, missing)
    raise ValueError(f"unknown column {key!r}")


def _filter_link(text: str, view: JobsView, title: str) -> dcc.Link:
    return dcc.Link(text, href="/jobs" + view.search(), title=title, className="filter-link")


def _straggler(job: query.JobRow, found: list[query.StragglerRow], missing: Any) -> Any:
    if found:
        worst = max(found, key=lambda s: s.slowdown)
        active = " (now)" if worst.ended_at is None else ""
        return html.Span(
            f"⚠ straggler{active}: {worst.culprit}, {worst.cause}, ~{worst.slowdown:.0%}",
            className="straggler-flag",
            style={"color": "var(--mantine-color-red-text)"},
        )
    if job.gpus < 2:
        return missing(job_gaps.ONE_GPU)
    return html.Span("none", title="the straggler detector found none in this range", style={"color": MUTED})
