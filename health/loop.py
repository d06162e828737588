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
from gpuscope.health import episodes, ladder, store
from gpuscope.health.commands import run_command
from gpuscope.health.decide import after_findings, refusal
from gpuscope.health.evidence import find_evidence
from gpuscope.health.model import Actor, Evidence, Severity, State, Transition
from gpuscope.health.policy import HealthPolicy
from gpuscope.health.schedulers.base import REASON_PREFIX, GpuScheduler, Outcome, Scheduler, SchedulerNode
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
    episode: episodes.OpenEpisode | None = None  # its open episode, for the nodes out of service


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
        self._repairs: dict[int, asyncio.Task[Outcome]] = {}  # the ladder's repair under way, per drained node
        self._repaired_at: dict[int, datetime] = {}  # its quiet window counts from the repair's end

    async def settle(self, timeout_s: float = 30.0) -> None:
        """Wait (at most `timeout_s`) for the checks and repairs under way: tests and benches that drive
        cycles at chosen times, so that a check's verdict is there for the next cycle."""
        running = [t for t in (*self._validations.values(), *self._repairs.values()) if not t.done()]
        if running:
            await asyncio.wait(running, timeout=timeout_s)

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
        out_of_service = [n for n in watched if rows[n].state in (State.DRAINED, State.VALIDATING)]
        open_episodes = await episodes.open_episodes(conn, out_of_service)
        for node_id in watched:
            row = rows[node_id]
            node = _Node(
                row, by_node.get(node_id, []), summaries.get(node_id), seen.get(row.name), open_episodes.get(node_id)
            )
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
        for node_id in list(self._validations.keys() | self._validated | self._repairs.keys()):
            if shard_of(str(node_id), shards.shards) not in shards.held:
                self._cancel_validation(node_id)
                if (repair := self._repairs.pop(node_id, None)) is not None:
                    repair.cancel()  # the new leader finds the node drained and validates it after its quiet window

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
            await episodes.note_findings(conn, node.row.node_id, counted)
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
        words = _words(items)
        recent = node.summary.recent if node.summary else len(items)
        to = after_findings(state, store.severity_of(items), recent, self.policy)
        if state in (State.UNHEALTHY, State.VALIDATING):
            self._cancel_validation(node.row.node_id)  # a check of a node not quiet after all
        if to == state:
            return state
        if state == State.VALIDATING and to == State.DRAINED:
            return await self._move(conn, node, to, f"new evidence while validating: {words}", now, report)
        if state == State.SUSPECT and to == State.UNHEALTHY and store.severity_of(items) != Severity.UNHEALTHY:
            reason = f"{recent} findings in {_span(self.policy.suspect_window_s)}, the newest: {words}"
            return await self._move(conn, node, to, reason, now, report)
        return await self._move(conn, node, to, words, now, report)

    async def _operator_took_over(
        self, conn: AsyncConnection[Any], node: _Node, now: datetime, report: CycleReport
    ) -> bool:
        """A node gpuscope had out of service that an operator resumed, or drained again for a reason of
        their own, in the scheduler."""
        if not self.live:
            return False
        if node.episode is not None and node.episode.scope == "gpu":
            return await self._gpu_resumed_by_operator(conn, node, now, report)
        if node.seen is None:
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

    async def _gpu_resumed_by_operator(
        self, conn: AsyncConnection[Any], node: _Node, now: datetime, report: CycleReport
    ) -> bool:
        """A node whose one GPU gpuscope took out (its node never cordoned): an operator who removed the
        device taint resumed it."""
        gpus = self._gpu_scheduler
        if gpus is None or node.episode is None:
            return node.row.held_by is not None
        try:
            taints = await gpus.gpu_drains(node.row.name)
        except RuntimeError as exc:
            log.warning("cannot read the device taints of %s: %s", node.row.name, exc)
            return True  # nothing is known: change nothing this cycle
        episode = node.episode
        if any(t.gpu_uuid == episode.gpu_uuid or t.gpu_index == episode.gpu_index for t in taints):
            return node.row.held_by is not None
        self._cancel_validation(node.row.node_id)
        await self._move(
            conn, node, State.HEALTHY, "device taint removed by an operator", now, report, actor=Actor.HUMAN
        )
        return True

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
        counts = await store.guard_counts(conn, now - timedelta(hours=1))
        refused = refusal(self.policy, counts, self._jobs.get(row.node_id, []))
        if refused is not None:
            if row.reason != refused:  # once per reason, not every cycle
                await self._say(conn, row, refused, None)
                await store.record_action(
                    conn, now, row.node_id, "refused", self._scheduler_name, self.policy.dry_run, None, refused
                )
                log.warning("health: %s", refused)
            return
        cause = node.summary.worst if node.summary else row.reason
        reason = REASON_PREFIX + cause
        episode, choice = await self._choose_repair(conn, row, now)
        if not self.live:
            # Recorded, not done: the node stays unhealthy and in service, and no guard rail counts it.
            command = self.scheduler.command("drain", row.name, reason) if self.scheduler else "no scheduler configured"
            await store.record_action(  # the repair it would choose is in the episode's record
                conn, now, row.node_id, "drain", self._scheduler_name, True, None, f"would run: {command}"
            )
            await self._say(conn, row, WOULD_DRAIN + self._drain_words(node), None)
            return
        assert self.scheduler is not None
        gpus = await self._one_gpu_will_do(row, episode, choice)
        by_gpu = gpus is not None and episode is not None
        if gpus is not None and episode is not None:
            outcome = await gpus.drain_gpu(row.name, episode.gpu_uuid, episode.gpu_index, reason)
            if not outcome.ok:  # the device is not to be found (MIG, not published): the node, as elsewhere
                await store.record_action(conn, now, row.node_id, "drain", self.scheduler.name, False, False,
                                          outcome.detail)  # fmt: skip
                by_gpu = False
                outcome = await self.scheduler.drain(row.name, reason)
        else:
            outcome = await self.scheduler.drain(row.name, reason)
        await store.record_action(
            conn, now, row.node_id, "drain", self.scheduler.name, False, outcome.ok, outcome.detail
        )
        if not outcome.ok:
            await self._say(conn, row, f"drain failed: {outcome.detail}", None)
            return
        if episode is not None:
            count = 1 if by_gpu else await episodes.gpu_count(conn, row.node_id)
            await episodes.taken_out(conn, episode.episode_id, now, "gpu" if by_gpu else "node", count)
        await self._move(conn, node, State.DRAINED, self._drain_words(node), now, report)
        if choice is not None:
            await self._repair(conn, node, episode, choice, now)

    async def _choose_repair(
        self, conn: AsyncConnection[Any], row: store.NodeRow, now: datetime
    ) -> tuple[episodes.OpenEpisode | None, ladder.Choice | None]:
        """The ladder's step for this episode, chosen once (at its first drain, real or a dry run's) and kept."""
        episode = (await episodes.open_episodes(conn, [row.node_id])).get(row.node_id)
        if episode is None:  # unhealthy since before episodes were recorded
            return None, None
        if episode.rung is not None and episode.repair is not None:
            return episode, ladder.Choice(episode.rung, episode.repair, "chosen at the episode's first drain")  # type: ignore[arg-type]
        window = timedelta(seconds=self.policy.ladder_window_s)
        before = await episodes.failures_before(conn, row.node_id, episode.cause, now - window, episode.episode_id)
        steps: tuple[ladder.Repair, ...] = self.policy.ladder  # type: ignore[assignment]
        choice = ladder.choose(steps, self.policy.ladder_window_s, before, episode.cause, episode.action)
        await episodes.chose_repair(conn, episode.episode_id, choice.rung, choice.repair, choice.reason, not self.live)
        return episode, choice

    async def _one_gpu_will_do(
        self, row: store.NodeRow, episode: episodes.OpenEpisode | None, choice: ladder.Choice | None
    ) -> GpuScheduler | None:
        """The scheduler, where it takes out the one GPU instead of the node: the finding names a GPU, the
        repair is that GPU's reset, and the scheduler can keep one device from new work (DRA device taints)."""
        if episode is None or choice is None or choice.repair != "reset_gpu" or episode.gpu_id is None:
            return None
        if self.policy.validation is not None and self.policy.validation.preset == "nccl_all_reduce":
            return None  # its check needs every GPU of the node, which stays in service with one GPU out
        gpus = self._gpu_scheduler
        return gpus if gpus is not None and await gpus.gpu_drain_supported(row.name) else None

    @property
    def _gpu_scheduler(self) -> GpuScheduler | None:
        return self.scheduler if hasattr(self.scheduler, "drain_gpu") else None  # type: ignore[return-value]

    async def _repair(
        self,
        conn: AsyncConnection[Any],
        node: _Node,
        episode: episodes.OpenEpisode | None,
        choice: ladder.Choice,
        now: datetime,
    ) -> None:
        """A drained node's repair: held for inspection (the last step, never returned by gpuscope), or the
        site's command for the step, or, without one, the step recorded as recommended to the site."""
        row = node.row
        if choice.repair == "inspect":
            hold = ladder.INSPECT_HOLD + choice.reason
            await store.save_reason(conn, row.node_id, f"{row.reason}; held for hardware inspection", hold)
            node.row = store.NodeRow(row.node_id, row.cluster, row.name, row.state, row.since, row.reason, hold)
            await episodes.held_for_inspection(conn, row.node_id, now)
            log.warning("health: %s held for hardware inspection: %s", row.name, choice.reason)
            return
        argv = self.policy.repair_commands.get(choice.repair)
        if not argv:
            words = f"recommended: {ladder.WORDS[choice.repair]} ({choice.reason}); no repair command configured"
            await episodes.repaired(conn, row.node_id, words)
            return
        self._start_repair(row, argv, episode)

    def _start_repair(self, row: store.NodeRow, argv: Sequence[str], episode: episodes.OpenEpisode | None) -> None:
        gpu = "all" if episode is None or episode.gpu_index is None else str(episode.gpu_index)
        uuid = "" if episode is None or episode.gpu_uuid is None else episode.gpu_uuid
        command = [a.replace("{node}", row.name).replace("{gpu}", gpu).replace("{gpu_uuid}", uuid) for a in argv]
        self._repairs[row.node_id] = asyncio.create_task(
            _run_repair(command, self.policy.repair_timeout_s), name=f"repair {row.name}"
        )

    def _cancel_repair(self, node_id: int) -> None:
        task = self._repairs.pop(node_id, None)
        if task is not None:
            task.cancel()  # the command goes too (health/commands.py)
        self._repaired_at.pop(node_id, None)

    async def _repair_done(self, conn: AsyncConnection[Any], row: store.NodeRow, now: datetime) -> bool:
        """Whether the node's repair (if any) has ended; its outcome recorded when it has."""
        task = self._repairs.get(row.node_id)
        if task is None:
            return True
        if not task.done():
            return False
        self._repairs.pop(row.node_id)
        outcome = Outcome(False, "repair interrupted") if task.cancelled() else task.result()
        await store.record_action(conn, now, row.node_id, "repair", "none", False, outcome.ok, outcome.detail)
        await episodes.repaired(conn, row.node_id, outcome.detail)
        self._repaired_at[row.node_id] = now
        return True

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
        await episodes.validated(conn, row.node_id, outcome.detail, getattr(outcome, "failed_test", None))
        return outcome

    async def _maybe_validate(
        self, conn: AsyncConnection[Any], node: _Node, now: datetime, report: CycleReport
    ) -> None:
        row = node.row
        if row.held_by:
            return
        episode = node.episode
        if (
            episode is not None
            and episode.repair_result is None
            and row.node_id not in self._repairs
            and (argv := self.policy.repair_commands.get(episode.repair or "")) is not None  # type: ignore[call-overload]
        ):  # chosen, never finished: its command was cut short by a restart or a shard's move
            self._start_repair(row, argv, episode)
        if not await self._repair_done(conn, row, now):
            return
        last = node.summary.last_at if node.summary else None
        quiet_since = max(t for t in (row.since, last, self._repaired_at.get(row.node_id)) if t is not None)
        if now - quiet_since < self._s(self.policy.quiet_s):
            return
        missing = (await store.ready_to_return(conn, [row.node_id], now)).get(row.node_id, "no GPU known")
        if missing:
            cause = row.reason.split(WAITING)[0]  # the drain's reason, without what it waited for last cycle
            await self._say(conn, row, f"{cause}{WAITING}{missing}", None)  # saved only when it changed
            return
        reason = f"quiet for {_span(self.policy.quiet_s)}, every GPU reporting up, no row remap pending"
        await self._move(conn, node, State.VALIDATING, reason, now, report)
        self._start_validation(row, node.episode)

    def _start_validation(self, row: store.NodeRow, episode: episodes.OpenEpisode | None = None) -> None:
        """The site's check; of the one GPU where only that GPU is out (its node's others are in use)."""
        self._validated.discard(row.node_id)
        gpu = episode.gpu_index if episode is not None and episode.scope == "gpu" else None
        task = asyncio.create_task(run_validation(self.policy, row.name, gpu), name=f"validate {row.name}")
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
                self._start_validation(row, node.episode)
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
            episode = node.episode
            gpus = self._gpu_scheduler
            if episode is not None and episode.scope == "gpu" and gpus is not None:
                resumed = await gpus.resume_gpu(row.name, episode.gpu_uuid, episode.gpu_index)
            else:
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
        if to == State.HEALTHY:
            await episodes.close(conn, row.node_id, now, by_operator=actor == Actor.HUMAN)
            self._cancel_repair(row.node_id)
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


async def _run_repair(argv: list[str], timeout_s: float) -> Outcome:
    shown = " ".join(argv)
    ran = await run_command(argv, timeout_s)
    if ran.trouble:
        return Outcome(False, f"{shown}: {ran.trouble}")
    verdict = "done" if ran.ok else f"failed (exit {ran.returncode})"
    return Outcome(ran.ok, f"{shown}: {verdict}" + ran.tail())


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
    """A hold gpuscope set itself, which an operator's resume in the scheduler lifts: one inferred from the
    scheduler, or one for hardware inspection (the operator has looked); not one set through gpuscope."""
    return bool(row.held_by and row.held_by.startswith((HELD_BY_SCHEDULER, ladder.INSPECT_HOLD)))
