"""What the jobs list shows, as its URL says: ?state=running&range=24h&user=alice&q=llama&sort=-gpu_hours.
A shared address opens the same view. Filters and sorting are applied here, to the jobs loaded."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from gpuscope.collector import query
from gpuscope.dashboard import time_ranges
from gpuscope.dashboard.components import query_params, query_string
from gpuscope.dashboard.sorting import SortedView, next_sort

STATES = {"running": "running", "ended": "ended", "all": "all"}
QUERY_STATES: dict[str, query.JobState] = {"running": "running", "ended": "finished", "all": "all"}


@dataclass(frozen=True)
class Column:
    key: str  # in ?sort=
    header: str  # with its unit
    explains: str  # the header's hover text
    value: Callable[[query.JobRow, float | None], Any]  # the sort value; None sorts last either way
    descending_first: bool  # numbers: the largest first on the first click


def _straggler(_: query.JobRow, slowdown: float | None) -> float | None:
    return slowdown


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
            }
        )

    def sorted_by(self, key: str) -> JobsView:
        """This view sorted by `key` (dashboard/sorting.py)."""
        return replace(self, sort=next_sort(self.sort, key, BY_KEY[key].descending_first))

    @property
    def filtered(self) -> bool:
        return bool(self.user or self.namespace or self.text)


def pick(view: JobsView, jobs: list[query.JobRow]) -> list[query.JobRow]:
    """The jobs matching the view's free text (user and namespace are filtered by the query)."""
    if not view.text:
        return jobs
    needle = view.text.casefold()

    def hit(job: query.JobRow) -> bool:
        names = [job.job_id, job.workload or "", *(job.pods or [])]
        return any(needle in name.casefold() for name in names)

    return [job for job in jobs if hit(job)]


def order(view: JobsView, jobs: list[query.JobRow], slowdowns: dict[str, float]) -> list[query.JobRow]:
    """The jobs in the view's order; the store's (running first, most recent first) when none is set.
    Missing values sort last whichever way."""
    if not view.sort_key:
        return jobs
    column = BY_KEY[view.sort_key]
    known = [j for j in jobs if column.value(j, slowdowns.get(j.job_id)) is not None]
    unknown = [j for j in jobs if column.value(j, slowdowns.get(j.job_id)) is None]
    known.sort(key=lambda j: _comparable(column.value(j, slowdowns.get(j.job_id))), reverse=view.descending)
    return known + unknown


def _comparable(value: Any) -> Any:
    if isinstance(value, str):
        return value.casefold()
    if isinstance(value, tuple):
        return tuple(v.timestamp() if isinstance(v, datetime) else v for v in value)
    return value
