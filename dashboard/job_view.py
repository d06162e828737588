"""What the jobs list shows, as its URL says: ?state=running&range=24h&user=alice&q=llama&sort=-gpu_hours,
and &straggler=1 (only jobs with a straggler in the range) or &idle=1 (only jobs holding idle GPUs now). A
shared address opens the same view. Filters and sorting are applied here, to the jobs loaded."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from gpuscope.collector import query
from gpuscope.collector.query.idle_gpus import IDLE_FOR
from gpuscope.dashboard import time_ranges
from gpuscope.dashboard.components import query_params, query_string
from gpuscope.dashboard.sorting import SortedView, next_sort

STATES = {"running": "running", "ended": "ended", "all": "all"}
QUERY_STATES: dict[str, query.JobState] = {"running": "running", "ended": "finished", "all": "all"}


@dataclass(frozen=True)
class Found:
    """What the list found about a job beyond its row."""

    slowdown: float | None = None  # its worst straggler's, in the range; None: none found
    idle_gpus: int | None = None  # GPUs it holds idle now; None: not judged (ended, or younger than IDLE_FOR)


@dataclass(frozen=True)
class Column:
    key: str  # in ?sort=
    header: str  # with its unit
    explains: str  # the header's hover text
    value: Callable[[query.JobRow, Found], Any]  # the sort value; None sorts last either way
    descending_first: bool  # numbers: the largest first on the first click


def _straggler(_: query.JobRow, found: Found) -> float | None:
    return found.slowdown


def _idle(_: query.JobRow, found: Found) -> int | None:
    return found.idle_gpus


def judged_for_idle(job: query.JobRow, now: datetime | None = None) -> bool:
    """Whether the idle test can hold: running, and held its GPUs for IDLE_FOR at least."""
    return job.running and (now or datetime.now(UTC)) - job.started_at >= IDLE_FOR


# What "idle" means, wherever a page says it.
IDLE_WORDS = f"under {query.IDLE_BELOW_PCT:.0f}% utilisation for {IDLE_FOR.total_seconds() / 60:.0f} minutes and more"


COLUMNS = (
    Column("job", "job", "the scheduler's job id; click it for the job's page", lambda j, _: j.job_id, False),
    Column("user", "user", "who submitted it; click to show only their jobs", lambda j, _: j.user, False),
    Column("namespace", "namespace", "the Kubernetes namespace of its pods", lambda j, _: j.namespace, False),
    Column("workload", "workload", "the workload that makes its pods one job", lambda j, _: j.workload, False),
    Column(
        "state",
        "state",
        "running, or when it ended (the last allocation)",
        lambda j, _: (j.running, j.ended_at or j.last_seen),
        True,
    ),
    Column("nodes", "nodes", "nodes it ran on", lambda j, _: len(j.nodes), True),
    Column("gpus", "GPUs", "GPUs it held (a MIG device counts its GPU)", lambda j, _: j.gpus, True),
    Column(
        "gpu_hours",
        "GPU-hours",
        "GPUs held times hours held; a MIG device counts for its share of the GPU",
        lambda j, _: j.gpu_hours,
        True,
    ),
    Column(
        "util",
        "util (%)",
        "mean GPU utilisation: share of time a kernel was running (100% includes NCCL waits)",
        lambda j, _: j.usage.mean_util_pct,
        True,
    ),
    Column(
        "sm",
        "SM active (%)",
        "mean share of time the streaming multiprocessors had work",
        lambda j, _: j.usage.mean_sm_active_pct,
        True,
    ),
    Column(
        "tensor",
        "tensor active (%)",
        "mean share of time the tensor cores were busy: the closest to useful training work",
        lambda j, _: j.usage.mean_tensor_active_pct,
        True,
    ),
    Column("started", "started (UTC)", "when it first held a GPU", lambda j, _: j.started_at, True),
    Column("straggler", "straggler", "the worst straggler found in the range", _straggler, True),
    Column("idle", "idle GPUs", f"GPUs it holds now {IDLE_WORDS} (the GpuIdleInJob alert's test)", _idle, True),
)
BY_KEY = {c.key: c for c in COLUMNS}


@dataclass(frozen=True)
class JobsView(SortedView):
    state: str = "all"
    range_key: str = "24h"
    user: str = ""
    namespace: str = ""
    text: str = ""  # in the job id, workload or pod names, any case
    sort: str = ""  # a column key, "-" first for descending; "": running first, then the most recent
    straggler: bool = False  # only jobs with a straggler in the range
    idle: bool = False  # only jobs holding idle GPUs now

    @classmethod
    def from_search(cls, search: str | None) -> JobsView:
        params = query_params(search)
        state = params.get("state", "all")
        state = "ended" if state == "finished" else state  # the old name, in addresses shared before
        sort = params.get("sort", "")
        return cls(
            state=state if state in STATES else "all",
            range_key=params.get("range", "") if time_ranges.valid(params.get("range")) else "24h",
            user=params.get("user", ""),
            namespace=params.get("namespace", ""),
            text=params.get("q", "").strip(),
            sort=sort if sort.lstrip("-") in BY_KEY else "",
            straggler=params.get("straggler") == "1",
            idle=params.get("idle") == "1",
        )

    def search(self) -> str:
        return query_string(
            {
                "state": self.state,
                "range": self.range_key,
                "user": self.user,
                "namespace": self.namespace,
                "q": self.text,
                "sort": self.sort,
                "straggler": "1" if self.straggler else "",
                "idle": "1" if self.idle else "",
            }
        )

    def sorted_by(self, key: str) -> JobsView:
        """This view sorted by `key` (dashboard/sorting.py)."""
        return replace(self, sort=next_sort(self.sort, key, BY_KEY[key].descending_first))

    @property
    def filtered(self) -> bool:
        return bool(self.user or self.namespace or self.text or self.straggler or self.idle)


def pick(
    view: JobsView,
    jobs: list[query.JobRow],
    stragglers: Mapping[str, Sequence[Any]] | None = None,
    idle: Mapping[str, Sequence[Any]] | None = None,
) -> list[query.JobRow]:
    """The jobs matching the view's free text and flags: with a straggler (`stragglers`: job_id -> those
    found), holding idle GPUs (`idle`: job_id -> those). User and namespace are filtered by the query."""
    needle = view.text.casefold()

    def hit(job: query.JobRow) -> bool:
        if view.straggler and not (stragglers or {}).get(job.job_id):
            return False
        if view.idle and not (idle or {}).get(job.job_id):
            return False
        names = [job.job_id, job.workload or "", *(job.pods or [])]
        return not needle or any(needle in name.casefold() for name in names)

    return [job for job in jobs if hit(job)]


def found(job: query.JobRow, slowdowns: dict[str, float], idle: Mapping[str, Sequence[Any]] | None = None) -> Found:
    """What the list found about `job`: its worst slowdown, how many GPUs it holds idle (if judged)."""
    held_idle = len((idle or {}).get(job.job_id, ())) if judged_for_idle(job) else None
    return Found(slowdowns.get(job.job_id), held_idle)


def order(
    view: JobsView,
    jobs: list[query.JobRow],
    slowdowns: dict[str, float],
    idle: Mapping[str, Sequence[Any]] | None = None,
) -> list[query.JobRow]:
    """The jobs in the view's order; the store's (running first, most recent first) when none is set.
    Missing values sort last whichever way."""
    if not view.sort_key:
        return jobs
    column = BY_KEY[view.sort_key]
    values = {j.job_id: column.value(j, found(j, slowdowns, idle)) for j in jobs}
    known = [j for j in jobs if values[j.job_id] is not None]
    unknown = [j for j in jobs if values[j.job_id] is None]
    known.sort(key=lambda j: _comparable(values[j.job_id]), reverse=view.descending)
    return known + unknown


def _comparable(value: Any) -> Any:
    if isinstance(value, str):
        return value.casefold()
    if isinstance(value, tuple):
        return tuple(v.timestamp() if isinstance(v, datetime) else v for v in value)
    return value
