"""The jobs list as a table: headers that sort (links to the same view sorted, so the order is in the
URL too), each job linked to its page, its user and namespace linked to the list filtered by them, its
straggler linked to the straggling GPU's page, the GPUs it holds idle, and a reason on every "-"."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gpuscope.collector import query
from gpuscope.collector.query.idle_gpus import IdleGpu
from gpuscope.dashboard import html_table, job_gaps
from gpuscope.dashboard.components import ago, job_href, node_href
from gpuscope.dashboard.html_table import escape, link, span
from gpuscope.dashboard.job_view import COLUMNS, IDLE_WORDS, Column, JobsView, judged_for_idle
from gpuscope.stragglers.reads import StragglerRow

NUMERIC = {"nodes", "gpus", "gpu_hours", "util", "sm", "tensor"}


def gpu_hours(hours: float) -> str:
    """GPU-hours to a tenth; a young or small job's to a hundredth, not a bare 0.0."""
    return f"{hours:.2f}" if hours < 1 else f"{hours:.1f}"


def jobs_table(
    view: JobsView,
    jobs: list[query.JobRow],
    stragglers: dict[str, list[StragglerRow]],
    idle: dict[str, list[IdleGpu]] | None = None,
) -> Any:
    """The table, and under it the legend of its "-" cells. One HTML table (dashboard/html_table.py): as
    Dash components, its ~1,200 elements took a second to render."""
    kubernetes = any(job.namespace for job in jobs)  # the pods' columns only where there are pods
    columns = [c for c in COLUMNS if kubernetes or c.key not in ("namespace", "workload")]
    reasons: list[str] = []
    header = [html_table.element("span", _sort_link(view, c), title=c.explains) for c in columns]
    body = [
        [_cell(c.key, job, view, Held(stragglers.get(job.job_id, []), (idle or {}).get(job.job_id, [])), reasons)
         for c in columns]
        for job in jobs
    ]  # fmt: skip
    numeric = [c.key in NUMERIC for c in columns]
    return [html_table.table(header, body, id="jobs", numeric=numeric), job_gaps.legend(reasons)]


def _sort_link(view: JobsView, column: Column) -> str:
    arrow = ""
    if view.sort_key == column.key:
        arrow = " ▼" if view.descending else " ▲"
    return link(column.header + arrow, "/jobs" + view.sorted_by(column.key).search(), className="sort-link")


@dataclass(frozen=True)
class Held:
    """What the list found about one job: its stragglers in the range, the GPUs it holds idle now."""

    stragglers: list[StragglerRow]
    idle: list[IdleGpu]


def _cell(key: str, job: query.JobRow, view: JobsView, found: Held, reasons: list[str]) -> str:
    def missing(reason: str) -> str:
        reasons.append(reason)
        return span("-", title=reason, className="gap")

    usage = job.usage
    match key:
        case "job":
            return link(job.job_id, job_href(job.job_id))
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
            return escape(job.workload)
        case "state":
            if job.running:
                return span("running", title=f"since {job.started_at:%Y-%m-%d %H:%M:%S} UTC", className="one-line")
            assert job.ended_at is not None  # a job that is not running has ended
            ended = f"ended {job.ended_at:%Y-%m-%d %H:%M:%S} UTC"
            return span(f"ended {ago(job.ended_at)}", title=ended, className="one-line")
        case "nodes":
            return span(len(job.nodes), title=", ".join(job.nodes))
        case "gpus":
            slices = f"; {job.mig_devices} of them as MIG devices" if job.mig_devices else ""
            return span(job.gpus, title=f"{job.gpus} GPUs{slices}")
        case "gpu_hours":
            return gpu_hours(job.gpu_hours)
        case "util" | "sm" | "tensor":
            value = {"util": usage.mean_util_pct, "sm": usage.mean_sm_active_pct}.get(key, usage.mean_tensor_active_pct)
            if value is None:
                metric = {"sm": "sm_active"}.get(key, key)
                return missing(job_gaps.why_no_usage(usage, metric, job.started_at, job.mig_devices > 0))
            return f"{value:.0f}"
        case "started":
            return span(f"{job.started_at:%Y-%m-%d %H:%M}", className="one-line")
        case "straggler":
            return _straggler(job, found.stragglers, missing)
        case "idle":
            return _idle(job, found.idle, missing)
    raise ValueError(f"unknown column {key!r}")


def _filter_link(text: str, view: JobsView, title: str) -> str:
    return link(text, "/jobs" + view.search(), title=title, className="filter-link")


def _straggler(job: query.JobRow, found: list[StragglerRow], missing: Any) -> str:
    if found:
        worst = max(found, key=lambda s: s.slowdown)
        active = " (now)" if worst.ended_at is None else ""
        words = f"⚠ straggler{active}: {worst.culprit}, {worst.cause}, ~{worst.slowdown:.0%}"
        if worst.node is None:  # the fabric, another job's traffic: no one GPU or node to open
            return span(words, className="straggler-flag")
        where = node_href(worst.node, worst.gpu)  # the GPU itself, where the detector named one
        return link(words, where, title=f"{worst.culprit}'s page", className="straggler-flag")
    if job.gpus < 2:
        return str(missing(job_gaps.ONE_GPU))
    return span("none", title="the straggler detector found none in this range", className="muted")


def _idle(job: query.JobRow, idle: list[IdleGpu], missing: Any) -> str:
    if not job.running:
        return str(missing(job_gaps.ENDED))
    if not judged_for_idle(job):
        return str(missing(job_gaps.TOO_YOUNG_FOR_IDLE))
    if not idle:
        return span("none", title=f"none of its GPUs {IDLE_WORDS}", className="muted")
    indices = ", ".join(f"{g.node} GPU {g.gpu_index}" for g in idle[:8]) + (", ..." if len(idle) > 8 else "")
    words = f"⚠ {len(idle)} of {job.gpus} idle"
    return span(words, title=f"{indices}: {IDLE_WORDS}", className="idle-flag one-line")
