"""A candidate health policy run over stored history: what it would have drained, what its guard rails
would have refused, the GPU-hours it would have taken out and the jobs it would have hit, beside what the
live policy did over the same window [start, end) (`gpuscope health replay`, `GET /api/v1/health/replay`).

The findings are the stored evidence (the rules' thresholds are not the policy's, so the same findings
stand for any policy); the decisions are the live loop's own (health/decide.py, health/ladder.py). What
a replay cannot know it assumes, and says so in its answer:
- every node starts the window healthy;
- a drain succeeds when the guard rails allow it, at the finding's time (the live loop acts within a cycle);
- a drained node's repair and check pass: it returns after `quiet_s` without a finding (a finding while
  out starts the wait again), unless its step is `inspect`, which keeps it out to the end;
- a refused drain is tried again whenever the rails may have changed (a node back, a drain older than an
  hour, a protected job's end), as the live loop does each cycle;
- the node is taken out whole (a device taint is a property of the cluster, not of the history).
Deterministic: events are ordered by time, then kind, then node; nothing reads a clock. It never talks
to a scheduler: this module imports none."""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gpuscope.health import ladder
from gpuscope.health.decide import after_findings, guard_rail, refusal
from gpuscope.health.model import Severity, State
from gpuscope.health.policy import HealthPolicy
from gpuscope.health.replay_data import Finding, History
from gpuscope.health.store import GuardCounts

RAILS = ("max_drained", "max_drains_per_hour", "protect")
LISTED = 500  # drains and refusals listed one by one in an answer (the counts are always whole)
ASSUMPTIONS = (
    "every node starts the window healthy",
    "a drain the guard rails allow succeeds at the finding's time",
    "repairs and checks pass: a drained node returns after quiet_s without a finding, unless held for inspection",
    "a refused drain is retried whenever the guard rails may allow it",
    "nodes are taken out whole",
)
# Timers at one instant run in this order, before the findings of that instant: a node back frees room first.
_RETURN, _CLEAR, _RETRY = 0, 1, 2


class ReplayError(ValueError):
    """A window the replay cannot answer for; the message says why."""


@dataclass
class _Episode:
    cause: str
    action: str
    started: datetime
    out_at: datetime | None = None
    repair: str | None = None


@dataclass
class _Node:
    state: State = State.HEALTHY
    recent: deque[datetime] = field(default_factory=deque)
    last: datetime | None = None
    episode: _Episode | None = None
    refused_by: str | None = None  # the guard rail that refused its pending drain (said once per rail)
    version: int = 0  # timers set before the node last moved are stale


@dataclass
class Side:
    """One policy's record over the window."""

    drains: int = 0
    refusals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RAILS, 0))
    gpu_hours_out: float = 0.0
    jobs_hit: set[str] = field(default_factory=set)
    repairs: dict[str, int] = field(default_factory=dict)
    held_for_inspection: int = 0
    listed_drains: list[dict[str, Any]] = field(default_factory=list)
    listed_refusals: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "drains": self.drains,
            "refusals": self.refusals,
            "gpu_hours_out": round(self.gpu_hours_out, 3),
            "jobs_hit": len(self.jobs_hit),
            "repairs": dict(sorted(self.repairs.items())),
            "held_for_inspection": self.held_for_inspection,
            "drain_list": self.listed_drains,
            "refusal_list": self.listed_refusals,
        }


@dataclass(frozen=True)
class ReplayReport:
    start: datetime
    end: datetime
    findings: int
    nodes: int
    candidate: Side
    live: Side
    live_dry_run_drains: int

    def as_json(self) -> dict[str, Any]:
        return {
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "findings": self.findings,
            "nodes": self.nodes,
            "candidate": self.candidate.as_json(),
            "live": {**self.live.as_json(), "dry_run_drains": self.live_dry_run_drains},
            "assumptions": list(ASSUMPTIONS),
        }


def replay(policy: HealthPolicy, history: History, start: datetime, end: datetime) -> ReplayReport:
    in_window = sum(1 for f in history.findings if f.at >= start)
    if not in_window:
        raise ReplayError(
            f"no health evidence between {start.isoformat()} and {end.isoformat()}: nothing to replay"
            " (the health loop records findings only while a collector runs it)"
        )
    candidate = _Replay(policy, history, start, end).run()
    return ReplayReport(start, end, in_window, len(history.nodes), candidate, _live_side(history, start, end),
                        history.live.dry_run_drains)  # fmt: skip


class _Replay:
    def __init__(self, policy: HealthPolicy, history: History, start: datetime, end: datetime) -> None:
        self.policy = policy
        self.history = history
        self.start, self.end = start, end
        self.nodes: dict[int, _Node] = {}
        self.timers: list[tuple[datetime, int, int, int]] = []  # at, kind, node, version
        self.out: set[int] = set()  # nodes out of service now
        self.drain_times: deque[datetime] = deque()  # drains of the last hour
        self.pending: set[int] = set()  # unhealthy nodes whose drain was refused
        self.failures: dict[tuple[int, str], list[datetime]] = {}  # the ladder's count, per node and cause
        for node_id, cause, started in history.earlier_failures:
            self.failures.setdefault((node_id, cause), []).append(started)
        self.side = Side()
        self.window = timedelta(seconds=policy.suspect_window_s)

    def run(self) -> Side:
        for finding in self.history.findings:
            if finding.at < self.start:  # before the window: counts toward "recent" only
                self._node(finding.node_id).recent.append(finding.at)
                continue
            self._timers_until(finding.at)
            self._finding(finding)
        self._timers_until(self.end)
        for node_id in sorted(self.out):  # still out at the window's end
            episode = self.nodes[node_id].episode
            assert episode is not None and episode.out_at is not None
            self._count_out(node_id, episode.out_at, self.end)
        return self.side

    @staticmethod
    def _quiet_since(node: _Node, at: datetime, seconds: float) -> bool:
        return node.last is None or at - node.last >= timedelta(seconds=seconds)

    def _node(self, node_id: int) -> _Node:
        return self.nodes.setdefault(node_id, _Node())

    def _timers_until(self, t: datetime) -> None:
        while self.timers and self.timers[0][0] <= t:
            at, kind, node_id, version = heapq.heappop(self.timers)
            node = self.nodes[node_id]
            if kind == _RETRY:
                self._retry(at)
            elif version != node.version:
                continue
            elif kind == _RETURN and self._quiet_since(node, at, self.policy.quiet_s):  # else a later one is set
                self._return(node_id, node, at)
            elif (
                kind == _CLEAR
                and node.state == State.SUSPECT
                and self._quiet_since(node, at, self.policy.suspect_clear_s)
            ):
                self._move(node, State.HEALTHY)
                node.episode = None

    def _finding(self, f: Finding) -> None:
        node = self._node(f.node_id)
        node.recent.append(f.at)
        while node.recent and node.recent[0] <= f.at - self.window:
            node.recent.popleft()
        node.last = f.at
        if node.episode is None:
            node.episode = _Episode(f.cause, f.action, f.at)
        elif node.episode.repair is None and f.severity == Severity.UNHEALTHY:
            node.episode.cause, node.episode.action = f.cause, f.action
        was = node.state
        to = after_findings(was, Severity(f.severity), len(node.recent), self.policy)
        if to != was:
            self._move(node, to)
        if to == State.UNHEALTHY and f.node_id not in self.pending:
            self._drain(f.node_id, node, f.at)
        elif to == State.SUSPECT:
            self._timer(f.at + timedelta(seconds=self.policy.suspect_clear_s), _CLEAR, f.node_id, node)
        elif to == State.DRAINED and node.episode.repair != "inspect":
            self._timer(f.at + timedelta(seconds=self.policy.quiet_s), _RETURN, f.node_id, node)

    def _drain(self, node_id: int, node: _Node, t: datetime) -> None:
        while self.drain_times and self.drain_times[0] <= t - timedelta(hours=1):
            self.drain_times.popleft()
        jobs = self.history.running(node_id, t)
        counts = GuardCounts(len(self.out), len(self.history.nodes), len(self.drain_times))
        refused = refusal(self.policy, counts, [(j.job_id, j.user) for j in jobs])
        if refused is not None:
            self.pending.add(node_id)
            rail = guard_rail(refused)
            if node.refused_by != rail:  # once per reason, as the live loop says it
                node.refused_by = rail
                self.side.refusals[rail] += 1
                self._list(self.side.listed_refusals, {"at": t.isoformat(), **self._where(node_id), "rail": rail,
                                                       "reason": refused})  # fmt: skip
            if rail == "protect":  # tried again when the protected jobs have ended
                ends = [j.end for j in jobs if j.end is not None and self.policy.protects(j.job_id, j.user)]
                if ends:
                    heapq.heappush(self.timers, (max(ends), _RETRY, node_id, node.version))
            return
        self.pending.discard(node_id)
        node.refused_by = None
        episode = node.episode
        assert episode is not None
        window = timedelta(seconds=self.policy.ladder_window_s)
        before = [s for s in self.failures.get((node_id, episode.cause), []) if s >= t - window]
        steps: tuple[ladder.Repair, ...] = self.policy.ladder  # type: ignore[assignment]
        choice = ladder.choose(steps, self.policy.ladder_window_s, len(before), episode.cause, episode.action)
        self.failures.setdefault((node_id, episode.cause), []).append(episode.started)
        episode.out_at, episode.repair = t, choice.repair
        self.out.add(node_id)
        self.drain_times.append(t)
        heapq.heappush(self.timers, (t + timedelta(hours=1), _RETRY, node_id, node.version))
        self._move(node, State.DRAINED)
        self.side.drains += 1
        self.side.repairs[choice.repair] = self.side.repairs.get(choice.repair, 0) + 1
        self.side.jobs_hit.update(j.job_id for j in jobs)
        self._list(self.side.listed_drains, {"at": t.isoformat(), **self._where(node_id), "cause": episode.cause,
                                             "repair": choice.repair, "rung": choice.rung,
                                             "jobs": [j.job_id for j in jobs]})  # fmt: skip
        if choice.repair == "inspect":
            self.side.held_for_inspection += 1
        else:
            self._timer(t + timedelta(seconds=self.policy.quiet_s), _RETURN, node_id, node)

    def _return(self, node_id: int, node: _Node, t: datetime) -> None:
        episode = node.episode
        assert episode is not None and episode.out_at is not None
        self._count_out(node_id, episode.out_at, t)
        self.out.discard(node_id)
        self._move(node, State.HEALTHY)
        node.episode = None
        self._retry(t)

    def _retry(self, t: datetime) -> None:
        """The refused drains, tried again in node order (as the live loop's cycle does)."""
        for node_id in sorted(self.pending):
            node = self.nodes[node_id]
            if node.state == State.UNHEALTHY:
                self._drain(node_id, node, t)
            else:
                self.pending.discard(node_id)

    def _move(self, node: _Node, to: State) -> None:
        node.state = to
        node.version += 1

    def _timer(self, at: datetime, kind: int, node_id: int, node: _Node) -> None:
        heapq.heappush(self.timers, (at, kind, node_id, node.version))

    def _count_out(self, node_id: int, out_at: datetime, back: datetime) -> None:
        span = (min(back, self.end) - max(out_at, self.start)).total_seconds()
        self.side.gpu_hours_out += self.history.nodes[node_id].gpus * max(span, 0) / 3600

    def _where(self, node_id: int) -> dict[str, str]:
        node = self.history.nodes[node_id]
        return {"cluster": node.cluster, "node": node.name}

    def _list(self, into: list[dict[str, Any]], item: dict[str, Any]) -> None:
        if len(into) < LISTED:
            into.append(item)


def _live_side(history: History, start: datetime, end: datetime) -> Side:
    """What the live policy did, from its audit trail and episodes (drains before episodes were recorded
    count the node's GPUs; the lists are the candidate's only)."""
    live = Side()
    record = history.live
    live.drains = record.drains
    live.repairs = dict(record.repairs)
    live.held_for_inspection = record.held_for_inspection
    for rail, count in record.refusals.items():
        live.refusals[rail] = live.refusals.get(rail, 0) + count
    for node_id, drained, back in record.out_spans:
        if node_id not in history.nodes:
            continue
        gpus = record.gpus_out.get((node_id, drained), history.nodes[node_id].gpus)
        span = (min(back or end, end) - max(drained, start)).total_seconds()
        live.gpu_hours_out += gpus * max(span, 0) / 3600
    for node_id, at in record.drained_at:
        live.jobs_hit.update(j.job_id for j in history.running(node_id, at))
    return live
