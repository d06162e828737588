"""The health loop: each cycle finds new evidence, moves nodes between states, and drains, validates and
resumes them through the scheduler, within the site's policy (health/policy.py).

    healthy --suspect finding--> suspect --a 3rd in a day--> unhealthy
    healthy|suspect|validating --unhealthy finding--> unhealthy (drain requested)
    unhealthy --drain allowed and done--> drained        (refused: stays unhealthy, and says why)
    drained --quiet for quiet_s, every GPU up, no remap pending--> validating
    validating --the site's command passes, node resumed--> healthy   (fails: back to drained)
    suspect --no finding for suspect_clear_s--> healthy

An operator has the last word: a node resumed by hand in the scheduler is healthy again (gpuscope does
not drain it again for the evidence it had, only for new evidence), a node drained by hand with another
reason is held (never resumed by gpuscope), and a hold set through gpuscope stops every action on it.

A dry run records what it would do and changes no state that counts: a node it would drain stays
unhealthy (nothing took it out of service, so the guard rails do not count it and nothing says
"drained"), its drain is recorded as one that would have run, and it returns to healthy as a drained node
would (quiet, every GPU up, the site's check passed), with the resume recorded as not run."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from psycopg import AsyncConnection

from gpuscope.core.shards import SHARDS, shard_of
from gpuscope.health import store
from gpuscope.health.evidence import find_evidence
from gpuscope.health.model import Actor, Evidence, Severity, State, Transition
from gpuscope.health.policy import HealthPolicy
from gpuscope.health.schedulers.base import REASON_PREFIX, Outcome, Scheduler, SchedulerNode
from gpuscope.health.validate import run_validation

log = logging.getLogger(__name__)

LOOKBACK = timedelta(minutes=15)  # evidence looked for at a (re)start: what happened while no one led
# Pushes arrive late (an exporter sends every 10-60 s): each cycle judges up to the policy's lag_s before
# now, and reads again OVERLAP before its last window's end. A finding re-read is the same row (the
# store's key), not news.
OVERLAP = timedelta(seconds=60)
HELD_BY_SCHEDULER = "scheduler: "  # a hold gpuscope inferred from the scheduler, lifted by it too
WAITING = " | waiting: "  # a drained node's reason, then what keeps it from validation
WOULD_DRAIN = "would drain (dry run: nothing drained): "  # a dry run's unhealthy node, its drain recorded
# "gphealth": the health loop's shard leases (core/shards.py): LOCK_KEY itself is its members' shared key,
# which also keeps out an older collector leading the whole loop alone under this key (and waits for it).
LOCK_KEY = 0x67706865616C7468


class NodeShards(Protocol):
    """The shards of nodes one loop leads (a ShardLease): node N is in shard shard_of(str(N), shards)."""

    @property
    def held(self) -> frozenset[int]: ...

    @property
    def shards(self) -> int: ...


@dataclass(frozen=True)
class EveryNode:
    """Every shard: one loop alone leads the whole fleet."""

    held: frozenset[int] = frozenset(range(SHARDS))
    shards: int = SHARDS


@dataclass
class CycleReport:
    new_evidence: int = 0
    transitions: list[Transition] = field(default_factory=list)


@dataclass
class _Node:
    """One node's row with what this cycle learnt about it."""

    row: store.NodeRow
    new: list[Evidence]
    summary: store.EvidenceSummary | None
    seen: SchedulerNode | None  # None: not asked, or the scheduler does not know it


class HealthLoop:
    def __init__(self, policy: HealthPolicy, scheduler: Scheduler | None = None) -> None:
        self.policy = policy
        self.scheduler = scheduler
        # Per shard held: the end of the last window read. A shard newly held starts LOOKBACK back, as a
        # fresh leader does; one given back is forgotten (whoever leads it next reads its own window).
        self._watermarks: dict[int, datetime] = {}
        self._shard_count = SHARDS
        self._validations: dict[int, asyncio.Task[Outcome]] = {}
        self._validated: set[int] = set()  # passed, resume still to do
        self._jobs: dict[int, list[tuple[str, str | None]]] = {}
        self._would_drain: dict[int, datetime] = {}  # dry run: nodes whose drain is recorded -> last acted on

    @property
    def live(self) -> bool:
        """Whether commands really run (a scheduler, and not a dry run)."""
        return self.scheduler is not None and not self.policy.dry_run

    async def cycle(
        self, conn: AsyncConnection[Any], now: datetime | None = None, shards: NodeShards | None = None
    ) -> CycleReport:
        """One round over the nodes of `shards` (a ShardLease: call its rebalance() before, never during, a
        round); None: every node. Only evidence of those nodes is recorded here: a finding is news once,
        to the loop that records it, so it must be the loop that judges its node."""
        now = now or datetime.now(UTC)
        shards = EveryNode() if shards is None else shards
        self._forget_shards_given_back(shards)  # first, before any await: no check outlives its shard's move
        report = CycleReport()
        if not shards.held:
            return report
        until = now - timedelta(seconds=self.policy.lag_s)
        starts = {s: self._watermarks[s] - OVERLAP if s in self._watermarks else now - LOOKBACK for s in shards.held}
        found = await find_evidence(conn, min(starts.values()), until)
        mine = [e for e in found if (s := shard_of(str(e.node_id), shards.shards)) in starts and e.at > starts[s]]
        new = await store.record_evidence(conn, mine)
        self._watermarks = dict.fromkeys(shards.held, until)
        report.new_evidence = len(new)
        rows = await store.load_nodes(conn)
        by_node: dict[int, list[Evidence]] = {}
        for item in new:
            by_node.setdefault(item.node_id, []).append(item)
        out = {n for n, row in rows.items() if row.state != State.HEALTHY and shard_of(str(n), shards.shards) in starts}
        watched = sorted(set(by_node) | out)
        summaries = await store.evidence_summary(conn, watched, now - timedelta(seconds=self.policy.suspect_window_s))
        seen = await self._scheduler_view([rows[n] for n in watched])
        self._jobs = await store.running_jobs(conn, watched)
        self._would_drain = {} if self.live else await store.dry_run_drains(conn, watched)
        for node_id in watched:
            node = _Node(rows[node_id], by_node.get(node_id, []), summaries.get(node_id), seen.get(rows[node_id].name))
            await self._judge(conn, node, now, report)
        return report

    def _forget_shards_given_back(self, shards: NodeShards) -> None:
        """Drop the watermarks and call off the checks of shards this loop no longer leads. The new leader
        finds such a node VALIDATING (or a dry run's node unhealthy, its drain recorded) with no check of
        its own running, and runs the check again: the node is checked once more, never by two at once."""
        if shards.shards != self._shard_count:  # shards cut differently: nothing known carries over
            self._watermarks = {}
            self._shard_count = shards.shards
        self._watermarks = {s: at for s, at in self._watermarks.items() if s in shards.held}
        for node_id in list(self._validations.keys() | self._validated):
            if shard_of(str(node_id), shards.shards) not in shards.held:
                self._cancel_validation(node_id)

    async def _scheduler_view(self, rows: Sequence[store.NodeRow]) -> dict[str, SchedulerNode]:
        out_of_service = [r.name for r in rows if r.state in (State.UNHEALTHY, State.DRAINED, State.VALIDATING)]
        if not self.live or not out_of_service:
            return {}
        assert self.scheduler is not None
        try:
            return await self.scheduler.nodes(out_of_service)
        except RuntimeError as exc:
            log.warning("cannot read node states from %s: %s", self.scheduler.name, exc)
            return {}

    async def _judge(self, conn: AsyncConnection[Any], node: _Node, now: datetime, report: CycleReport) -> None:
        counted = [e for e in node.new if e.severity != Severity.IGNORE]
        state = node.row.state
        if counted:
            state = await self._on_evidence(conn, node, counted, now, report)
        if state in (State.DRAINED, State.VALIDATING) and await self._operator_took_over(conn, node, now, report):
            return
        if state == State.UNHEALTHY:
            await self._drain(conn, node, now, report)
        elif (
            state == State.SUSPECT
            and node.summary
            and now - node.summary.last_at >= self._s(self.policy.suspect_clear_s)
        ):
            await self._move(
                conn, node, State.HEALTHY, f"no new evidence for {_span(self.policy.suspect_clear_s)}", now, report
            )
        elif state == State.DRAINED:
            await self._maybe_validate(conn, node, now, report)
        elif state == State.VALIDATING:
            await self._finish_validation(conn, node, now, report)

    async def _on_evidence(
        self, conn: AsyncConnection[Any], node: _Node, items: list[Evidence], now: datetime, report: CycleReport
    ) -> State:
        state = node.row.state
        worst = store.severity_of(items)
        words = _words(items)
        if worst == Severity.UNHEALTHY and state in (State.HEALTHY, State.SUSPECT, State.VALIDATING):
            self._cancel_validation(node.row.node_id)
            return await self._move(conn, node, State.UNHEALTHY, words, now, report)
        if state == State.UNHEALTHY:
            self._cancel_validation(node.row.node_id)  # a dry run's check of a node not quiet after all
        if state == State.VALIDATING:
            self._cancel_validation(node.row.node_id)
            return await self._move(conn, node, State.DRAINED, f"new evidence while validating: {words}", now, report)
        if state == State.HEALTHY:
            return await self._move(conn, node, State.SUSPECT, words, now, report)
        recent = node.summary.recent if node.summary else len(items)
        if state == State.SUSPECT and recent >= self.policy.suspect_limit:
            reason = f"{recent} findings in {_span(self.policy.suspect_window_s)}, the newest: {words}"
            return await self._move(conn, node, State.UNHEALTHY, reason, now, report)
        return state

    async def _operator_took_over(
        self, conn: AsyncConnection[Any], node: _Node, now: datetime, report: CycleReport
    ) -> bool:
        """A node gpuscope had out of service that an operator resumed, or drained again for a reason of
        their own, in the scheduler."""
        if not self.live or node.seen is None:
            return False
        if not node.seen.drained:
            self._cancel_validation(node.row.node_id)
            reason = f"resumed in {self.scheduler.name if self.scheduler else 'the scheduler'} by an operator"
            await self._move(
                conn, node, State.HEALTHY, reason, now, report, actor=Actor.HUMAN, clear_hold=_scheduler_hold(node.row)
            )
            return True
        if not node.seen.ours and node.row.held_by is None:
            held = HELD_BY_SCHEDULER + node.seen.reason
            await store.save_reason(conn, node.row.node_id, f"drained by an operator: {node.seen.reason}", held)
            return True
        return node.row.held_by is not None

    async def _drain(self, conn: AsyncConnection[Any], node: _Node, now: datetime, report: CycleReport) -> None:
        row = node.row
        if row.held_by:
            await self._say(conn, row, f"held ({row.held_by}): gpuscope takes no action", row.held_by)
            return
        if row.node_id in self._would_drain:
            await self._dry_run_return(conn, node, now, report)
            return
        # The counts are the database's, read again under the lock, and the drain is recorded before it is
        # let go: another collector deciding next counts this one.
        async with conn.transaction():
            await store.lock_guard_rails(conn)
            await self._drain_within_guard_rails(conn, node, now, report)

    async def _drain_within_guard_rails(
        self, conn: AsyncConnection[Any], node: _Node, now: datetime, report: CycleReport
    ) -> None:
        row = node.row
        refusal = self._refusal(row, await store.guard_counts(conn, now - timedelta(hours=1)))
        if refusal is not None:
            if row.reason != refusal:  # once per reason, not every cycle
                await self._say(conn, row, refusal, None)
                await store.record_action(
                    conn, now, row.node_id, "refused", self._scheduler_name, self.policy.dry_run, None, refusal
                )
                log.warning("health: %s", refusal)
            return
        cause = node.summary.worst if node.summary else row.reason
        reason = REASON_PREFIX + cause
        if not self.live:
            # Recorded, not done: the node stays unhealthy and in service, and no guard rail counts it.
            command = self.scheduler.command("drain", row.name, reason) if self.scheduler else "no scheduler configured"
            await store.record_action(
                conn, now, row.node_id, "drain", self._scheduler_name, True, None, f"would run: {command}"
            )
            await self._say(conn, row, WOULD_DRAIN + self._drain_words(node), None)
            return
        assert self.scheduler is not None
        outcome = await self.scheduler.drain(row.name, reason)
        await store.record_action(
            conn, now, row.node_id, "drain", self.scheduler.name, False, outcome.ok, outcome.detail
        )
        if not outcome.ok:
            await self._say(conn, row, f"drain failed: {outcome.detail}", None)
            return
        await self._move(conn, node, State.DRAINED, self._drain_words(node), now, report)

    def _drain_words(self, node: _Node) -> str:
        """Why the node is (or would be) drained, and the jobs that affects."""
        cause = node.summary.worst if node.summary else node.row.reason
        jobs = self._jobs.get(node.row.node_id, [])
        affected = f"; {len(jobs)} job{'s' if len(jobs) != 1 else ''} affected" if jobs else ""
        return f"{cause}{affected}"

    async def _dry_run_return(
        self, conn: AsyncConnection[Any], node: _Node, now: datetime, report: CycleReport
    ) -> None:
        """A dry run's unhealthy node whose drain is recorded returns to healthy on a drained node's terms
        (quiet for quiet_s, every GPU up and no remap pending, then the site's check), without ever being
        out of service; its reason keeps saying what the dry run would have done."""
        row = node.row
        said = row.reason.split(WAITING)[0]
        if said.startswith(WOULD_DRAIN):
            would = said
        else:  # a hold's words replaced it: say it again (the findings may be older than the window by now)
            would = WOULD_DRAIN + (self._drain_words(node) if node.summary else "the findings before the hold")
        task = self._validations.get(row.node_id)
        if task is None:
            last = node.summary.last_at if node.summary else None
            quiet_since = max(t for t in (row.since, self._would_drain[row.node_id], last) if t is not None)
            if now - quiet_since < self._s(self.policy.quiet_s):
                if not row.reason.startswith(WOULD_DRAIN):
                    await self._say(conn, row, would, None)
                return
            missing = (await store.ready_to_return(conn, [row.node_id], now)).get(row.node_id, "no GPU known")
            if missing:
                await self._say(conn, row, f"{would}{WAITING}{missing}", None)
                return
            await self._say(conn, row, would, None)
            self._start_validation(row)
            return
        if not task.done():
            return
        outcome = await self._validation_done(conn, row, now)
        if not outcome.ok:  # the quiet window starts again from this check
            await self._say(conn, row, f"{would}{WAITING}validation failed: {outcome.detail}", None)
            return
        command = self.scheduler.command("resume", row.name) if self.scheduler else "no scheduler configured"
        await store.record_action(
            conn, now, row.node_id, "resume", self._scheduler_name, True, None, f"would run: {command}"
        )
        words = "validated (dry run: nothing was drained, nothing resumed)"
        await self._move(conn, node, State.HEALTHY, words, now, report)

    async def _validation_done(self, conn: AsyncConnection[Any], row: store.NodeRow, now: datetime) -> Outcome:
        """The finished check's outcome, recorded as the node's validate action."""
        outcome = self._validations.pop(row.node_id).result()
        await store.record_action(
            conn, now, row.node_id, "validate", self._scheduler_name, False, outcome.ok, outcome.detail
        )
        return outcome

    def _refusal(self, row: store.NodeRow, counts: store.GuardCounts) -> str | None:
        """Why the guard rails forbid draining this node now, or None."""
        limit = self.policy.drain_limit(counts.fleet)
        if counts.held_out >= limit:
            return (
                f"drain refused: {counts.held_out} node(s) already out of service by gpuscope, the policy allows"
                f" {limit} (max_drained {self.policy.max_drained}, max_drained_share {self.policy.max_drained_share:g}"
                f" of {counts.fleet} nodes)"
            )
        if counts.drains >= self.policy.max_drains_per_hour:
            allowed = self.policy.max_drains_per_hour
            return f"drain refused: {counts.drains} drains in the last hour, the policy allows {allowed}"
        for job_id, user in self._jobs.get(row.node_id, []):
            rule = self.policy.protects(job_id, user)
            if rule is not None:
                return f"drain refused: it runs job {job_id} ({user or 'user unknown'}), protected by {rule}"
        return None

    async def _maybe_validate(
        self, conn: AsyncConnection[Any], node: _Node, now: datetime, report: CycleReport
    ) -> None:
        row = node.row
        if row.held_by:
            return
        quiet_since = max(t for t in (row.since, node.summary.last_at if node.summary else None) if t is not None)
        if now - quiet_since < self._s(self.policy.quiet_s):
            return
        missing = (await store.ready_to_return(conn, [row.node_id], now)).get(row.node_id, "no GPU known")
        if missing:
            cause = row.reason.split(WAITING)[0]  # the drain's reason, without what it waited for last cycle
            await self._say(conn, row, f"{cause}{WAITING}{missing}", None)  # saved only when it changed
            return
        reason = f"quiet for {_span(self.policy.quiet_s)}, every GPU reporting up, no row remap pending"
        await self._move(conn, node, State.VALIDATING, reason, now, report)
        self._start_validation(row)

    def _start_validation(self, row: store.NodeRow) -> None:
        self._validated.discard(row.node_id)
        task = asyncio.create_task(run_validation(self.policy, row.name), name=f"validate {row.name}")
        self._validations[row.node_id] = task

    def _cancel_validation(self, node_id: int) -> None:
        task = self._validations.pop(node_id, None)
        if task is not None:
            task.cancel()
        self._validated.discard(node_id)

    async def _finish_validation(
        self, conn: AsyncConnection[Any], node: _Node, now: datetime, report: CycleReport
    ) -> None:
        row = node.row
        if row.node_id not in self._validated:
            task = self._validations.get(row.node_id)
            if task is None:  # a new leader, or a restart: validate again
                self._start_validation(row)
                return
            if not task.done():
                return
            outcome = await self._validation_done(conn, row, now)
            if not outcome.ok:
                await self._move(conn, node, State.DRAINED, f"validation failed: {outcome.detail}", now, report)
                return
            self._validated.add(row.node_id)
        if self.live:
            assert self.scheduler is not None
            resumed = await self.scheduler.resume(row.name)
            await store.record_action(
                conn, now, row.node_id, "resume", self.scheduler.name, False, resumed.ok, resumed.detail
            )
            if not resumed.ok:
                await self._say(conn, row, f"validated, but the resume failed: {resumed.detail}", None)
                return
            words = "validated and resumed"
        else:
            command = self.scheduler.command("resume", row.name) if self.scheduler else "no scheduler configured"
            await store.record_action(
                conn, now, row.node_id, "resume", self._scheduler_name, True, None, f"would run: {command}"
            )
            words = "validated (dry run: nothing resumed)"
        self._validated.discard(row.node_id)
        await self._move(conn, node, State.HEALTHY, words, now, report)

    async def _move(
        self,
        conn: AsyncConnection[Any],
        node: _Node,
        to: State,
        reason: str,
        now: datetime,
        report: CycleReport,
        actor: Actor = Actor.GPUSCOPE,
        clear_hold: bool = False,
    ) -> State:
        row = node.row
        move = Transition(now, row.node_id, row.state, to, reason, actor)
        held = None if clear_hold else row.held_by
        await store.save_transition(conn, move, held)
        node.row = store.NodeRow(row.node_id, row.cluster, row.name, to, now, reason, held)
        report.transitions.append(move)
        log.info("health: %s %s -> %s: %s", row.name, row.state, to, reason)
        return to

    async def _say(self, conn: AsyncConnection[Any], row: store.NodeRow, reason: str, held_by: str | None) -> None:
        if row.reason != reason or row.held_by != held_by:
            await store.save_reason(conn, row.node_id, reason, held_by)

    @property
    def _scheduler_name(self) -> str:
        return self.scheduler.name if self.scheduler else "none"

    @staticmethod
    def _s(seconds: float) -> timedelta:
        return timedelta(seconds=seconds)


def _words(items: list[Evidence]) -> str:
    """The worst finding in words, and how many more."""
    ranks = {Severity.UNHEALTHY: 0, Severity.SUSPECT: 1, Severity.IGNORE: 2}
    ordered = sorted(items, key=lambda e: (ranks[e.severity], -e.at.timestamp()))
    more = f" (+{len(items) - 1} more)" if len(items) > 1 else ""
    return ordered[0].detail + more


def _span(seconds: float) -> str:
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def _scheduler_hold(row: store.NodeRow) -> bool:
    """A hold gpuscope inferred from the scheduler (lifted with it), not one an operator set through gpuscope."""
    return bool(row.held_by and row.held_by.startswith(HELD_BY_SCHEDULER))
