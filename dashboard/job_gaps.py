"""Why a job's cell is empty: each "-" on the jobs pages carries the reason as its hover text, and a
legend under the table lists the reasons shown. The reasons are what the query layer's None means
(collector/query/jobs.py): a mean is None when no rolled-up minute of its allocations has the metric."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dash import html

from gpuscope.collector import query
from gpuscope.collector.query.idle_gpus import IDLE_FOR
from gpuscope.collector.store.rollups import SETTLE
from gpuscope.dashboard.components import MUTED

# A minute is counted once rolled up: SETTLE after it ends, at the next maintenance pass (every minute).
ROLLUP_LAG = SETTLE + timedelta(minutes=2)

NO_USER_KUBERNETES = "no user: a Kubernetes job belongs to its namespace; the kubelet names no user"
NO_USER = "no user: the scheduler reported none for this job"
NOT_KUBERNETES = "not a Kubernetes job (Slurm or another scheduler): it has no namespace or workload"
NO_WORKLOAD = "no workload: the exporter reported its pods without one, so each pod is a job of its own"
NO_PODS = "no pod names: the sender reported the namespace without them"
TOO_RECENT = "not counted yet: minutes count once rolled up, about 3 minutes after they end"
MIG_NO_UTIL = "none on MIG devices: NVML reports no utilisation in MIG mode (see SM active)"
NOT_REPORTED = (
    "not reported by its GPUs: SM and tensor activity come from GPM (NVIDIA Hopper and later) or DCGM "
    "profiling; older NVIDIA GPUs and AMD GPUs report utilisation only"
)
NO_SAMPLES = "no samples of its GPUs in the store for the time it ran (exporter down, or past retention)"
NO_POWER = "its GPUs reported neither an energy counter nor power while it ran"
NO_ENERGY_MIG = "not measured on MIG devices: the board's power is shared by all its slices"
ONE_GPU = "not judged: the straggler detector compares each GPU with its peers, and this job has one"
ENDED = "it has ended: it holds no GPU now"
TOO_YOUNG_FOR_IDLE = (
    f"not judged yet: a GPU counts as idle after {IDLE_FOR.total_seconds() / 60:.0f} minutes under "
    f"{query.IDLE_BELOW_PCT:.0f}% utilisation, and this job has run less"
)


def gap(reason: str) -> html.Span:
    """A "-" that says why on hover (and, dotted, that it has something to say)."""
    return html.Span("-", title=reason, className="gap")  # dotted: dashboard/assets/gpuscope.css


def legend(reasons: list[str]) -> html.Div | None:
    """The reasons behind the "-" cells shown, once each, in order of first appearance."""
    if not reasons:
        return None
    unique = list(dict.fromkeys(reasons))
    return html.Div(
        [html.Strong('"-" means:'), html.Ul([html.Li(reason) for reason in unique], style={"margin": "0.2em 0"})],
        id="jobs-legend",
        style={"color": MUTED, "fontSize": "0.88em", "marginTop": "0.5em"},
    )


def why_no_user(job: query.JobRow) -> str:
    return NO_USER_KUBERNETES if job.namespace else NO_USER


def why_no_usage(
    usage: query.Usage, metric: str, started_at: datetime, on_mig: bool, now: datetime | None = None
) -> str:
    """Why a mean of `metric` (util, sm_active or tensor) of a job, or of one of its GPUs, is None."""
    if metric == "util" and on_mig:
        return MIG_NO_UTIL
    means = (usage.mean_util_pct, usage.mean_sm_active_pct, usage.mean_tensor_active_pct, usage.mean_power_w)
    if any(value is not None for value in means):
        return NOT_REPORTED  # its GPUs reported other metrics over the same minutes, not this one
    if (now or datetime.now(UTC)) - started_at < ROLLUP_LAG:
        return TOO_RECENT
    return NO_SAMPLES
