"""The overview's "Needs attention" as one line per job, node or rack, not one per signal.

One incident raises several signals: an uncorrectable ECC error gives the ECC alert, three XID alerts, the
node's drain and a pending row remap; an idle job one alert per GPU and one for the job; a straggler its
alert and the detector's finding. An operator wants the incident once, named by its most severe cause,
with the rest counted and one click away (the alerts page filtered to that job, node or rack).

A signal belongs to its job where it names one, else to its node, else to its rack; what names none (the
collector's own disk) is a line of its own. Lines go most severe first, newest first within a severity.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpuscope.alerts.reads import SEVERITY_ORDER, AlertRow
from gpuscope.collector.query import UnhealthyGpu
from gpuscope.dashboard.components import query_string
from gpuscope.stragglers.reads import StragglerRow

# An unhealthy GPU's reason (collector/query/fleet.py) that an alert of the same GPU (or node) already
# tells: the alert is the line's cause, the reason adds nothing. "row remap pending" has no alert.
TOLD_BY = {
    "not reporting": "ExporterDown",
    "down": "GpuLost",
    "row remap failed": "GpuRowRemapFailure",
    "critical XID": "GpuXidError",
}
RACK_ALERT = "RackPowerNearBudget"  # the rack's load the overview computes itself says the same, in kW
STRAGGLER_ALERT = "JobStraggler"  # the detector's finding, shown with its culprit instead


@dataclass(frozen=True)
class Cause:
    """One thing wrong: an alert (several of one name collapse into one cause), a straggler, an unhealthy
    GPU or a rack near its budget. `item` is what it came from, for drawing it."""

    severity: str
    name: str
    since: datetime | None
    item: Any
    alerts: tuple[AlertRow, ...] = ()  # an alert cause: every alert of this name in the line
    per_gpu: bool = False  # about one GPU (or each of several), not the whole job, node or rack

    @property
    def gpus(self) -> set[str]:
        return {a.labels["gpu"] for a in self.alerts if a.labels.get("gpu")}


@dataclass
class Concern:
    """A line: a job, node or rack (kind), or one alert that names none of them ("alert")."""

    kind: str
    key: str
    owner: str = ""  # a job's user (or namespace)
    causes: list[Cause] = field(default_factory=list)

    @property
    def head(self) -> Cause:
        return self.causes[0]

    @property
    def severity(self) -> str:
        return self.head.severity

    @property
    def rest(self) -> int:
        return len(self.causes) - 1

    def alerts_href(self) -> str:
        """The alerts page showing this line's alerts only."""
        if self.kind == "rack":
            cluster, _, rack = self.key.rpartition("/")
            return "/alerts" + query_string({"cluster": cluster, "rack": rack})
        label = {"job": "job_id", "node": "node", "alert": "alertname"}[self.kind]
        return "/alerts" + query_string({label: self.key})


def concerns(
    alerts: Iterable[AlertRow],
    stragglers: Iterable[StragglerRow] = (),
    unhealthy: Iterable[UnhealthyGpu] = (),
    racks: Iterable[Any] = (),
) -> list[Concern]:
    """The firing alerts and the overview's own findings as lines, most severe and newest first.
    `racks`: loads with rack ("cluster/rack"), current_kw, budget_kw and share (dashboard/data.py)."""
    stragglers, unhealthy, racks = list(stragglers), list(unhealthy), list(racks)
    straggling = {s.job_id for s in stragglers}
    near = {load.rack for load in racks}
    lines: dict[tuple[str, str], Concern] = {}
    by_name: dict[tuple[str, str, str], list[AlertRow]] = {}
    rack_since: dict[str, datetime] = {}
    for alert in alerts:
        labels = alert.labels
        rack = f"{labels.get('cluster', '')}/{labels.get('rack', '')}"
        if alert.alertname == STRAGGLER_ALERT and labels.get("job_id") in straggling:
            continue
        if alert.alertname == RACK_ALERT and rack in near:
            rack_since[rack] = min(alert.active_at, rack_since.get(rack, alert.active_at))
            continue
        line = _line_of(lines, alert)
        by_name.setdefault((line.kind, line.key, alert.alertname), []).append(alert)
    for (kind, key, name), group in by_name.items():
        group.sort(key=lambda a: (_rank(a.severity), bool(a.labels.get("gpu")), -a.active_at.timestamp()))
        worst = group[0]
        per_gpu = all(a.labels.get("gpu") for a in group)
        lines[(kind, key)].causes.append(Cause(worst.severity, name, worst.active_at, worst, tuple(group), per_gpu))
    for s in stragglers:
        line = lines.setdefault(("job", s.job_id), Concern("job", s.job_id))
        line.owner = line.owner or s.user or ""
        line.causes.append(Cause("warning", "straggler", s.started_at, s))
    for gpu in unhealthy:
        line = lines.setdefault(("node", gpu.node), Concern("node", gpu.node))
        if not _told(line, gpu):
            line.causes.append(Cause("critical", gpu.reason, None, gpu, per_gpu=True))
    for load in racks:
        line = lines.setdefault(("rack", load.rack), Concern("rack", load.rack))
        severity = "warning" if load.share < 1 else "critical"
        line.causes.append(Cause(severity, "near its power budget", rack_since.get(load.rack), load))
    for line in lines.values():
        line.causes.sort(key=_cause_order)
    return sorted((line for line in lines.values() if line.causes), key=lambda line: _line_order(line.head))


def _line_of(lines: dict[tuple[str, str], Concern], alert: AlertRow) -> Concern:
    labels = alert.labels
    if labels.get("job_id"):
        line = lines.setdefault(("job", labels["job_id"]), Concern("job", labels["job_id"]))
        line.owner = line.owner or labels.get("user") or labels.get("namespace") or ""
        return line
    if labels.get("node"):
        return lines.setdefault(("node", labels["node"]), Concern("node", labels["node"]))
    if labels.get("rack"):
        rack = f"{labels.get('cluster', '')}/{labels['rack']}"
        return lines.setdefault(("rack", rack), Concern("rack", rack))
    return lines.setdefault(("alert", alert.alertname), Concern("alert", alert.alertname))


def _told(line: Concern, gpu: UnhealthyGpu) -> bool:
    """Whether an alert in the node's line already says why this GPU is unhealthy."""
    name = next((n for reason, n in TOLD_BY.items() if gpu.reason.startswith(reason)), None)
    if name is None:
        return False
    return any(
        c.name == name and (name == "ExporterDown" or str(gpu.gpu_index) in c.gpus) for c in line.causes if c.alerts
    )


def _rank(severity: str) -> int:
    return SEVERITY_ORDER.index(severity) if severity in SEVERITY_ORDER else len(SEVERITY_ORDER)


def _line_order(head: Cause) -> tuple[int, float]:
    """Most severe first, then the newest (a cause with no time of its own goes last)."""
    return (_rank(head.severity), -(head.since or datetime.min.replace(tzinfo=UTC)).timestamp())


def _cause_order(cause: Cause) -> tuple[int, bool, int, float]:
    """As lines go, except that at one severity what concerns the whole job or node comes before what
    concerns its GPUs (the job holding idle GPUs before each idle GPU), and one finding before a cause of
    several alerts (the ECC error before the XIDs it raised)."""
    rank, newest = _line_order(cause)
    return (rank, cause.per_gpu, max(len(cause.alerts), 1), newest)
