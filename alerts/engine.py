"""The alert engine: evaluates each rule group on its interval, keeps alert states, queues
notifications and delivers them.

Across collector replicas the work is sharded by rule group (core/shards.py): each engine evaluates the
groups of the shards it holds, and the holder of shard 0 also queues and delivers the notifications,
over every group's alerts as stored (routing groups alerts of several rules together, and inhibition
looks across them). An engine that takes a shard over picks its alerts up from the database, their
`for:` clocks included; queueing is one transaction over the groups' bookkeeping (dispatch.py), so a
notification is neither lost nor repeated when the dispatcher changes.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import math
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import httpx
import psycopg
from psycopg import AsyncConnection

from gpuscope.alerts import state, store
from gpuscope.alerts.config import NotifyConfig
from gpuscope.alerts.delivery import Delivery
from gpuscope.alerts.dispatch import dispatch
from gpuscope.alerts.evaluate import RuleResult, evaluate_group
from gpuscope.alerts.facts import rack_facts
from gpuscope.alerts.notify import post
from gpuscope.alerts.rules import Group
from gpuscope.alerts.state import Instance
from gpuscope.core.shards import ShardLease

log = logging.getLogger(__name__)

LOCK_KEY = 0x67707573636F7066  # "gpuscopf": the alert engines' shard lease (the straggler watch has its own)
DISPATCH_SHARD = 0  # its holder queues and delivers the notifications
REBALANCE_S = 1.0  # how often an engine looks at its shards (between evaluations, never during one)
RESOLVED_IN_MEMORY = dt.timedelta(hours=6)  # long enough to announce them at any sane group_interval
HISTORY = dt.timedelta(days=30)  # resolved alerts and finished notifications kept this long


# How often the engine checks group timers and due groups (the collector's --alert-tick-s).
TICK_S = 0.5


class AlertEngine:
    def __init__(
        self,
        groups: list[Group],
        config: NotifyConfig | None,
        query_timeout_s: float = 10.0,
        tick_s: float = TICK_S,
        facts: Callable[[], Mapping[str, str]] | None = None,
        rack_budgets_kw: Mapping[str, float] | None = None,
    ) -> None:
        self.groups = groups
        self.facts = facts  # what this collector knows beyond the tables (alerts/facts.py), per evaluation
        self.rack_facts = rack_facts(rack_budgets_kw or {})  # the threshold is set even with no budget
        self.config = config
        self.query_timeout_s = query_timeout_s
        self.tick_s = tick_s
        self.instances: dict[str, Instance] = {}
        self._stored: dict[str, Instance] = {}  # as last written, to skip writes that change nothing
        self._errors: dict[tuple[str, str], str | None] = {}

    async def load(self, conn: AsyncConnection[Any]) -> None:
        """Pick up where the last engine stopped: alerts pending or firing, and resolved ones a group
        has yet to announce. Alerts of rules no longer configured are resolved first."""
        await self._resolve_gone_rules(conn)
        await self._adopt(conn)

    async def _resolve_gone_rules(self, conn: AsyncConnection[Any]) -> None:
        known = {(g.name, r.alert) for g in self.groups for r in g.rules}
        async with conn.transaction():  # with several engines, the first does it and the others find nothing
            gone = await store.resolve_unknown_rules(conn, known, _now())
        if gone:
            log.info("resolved the alerts of %d rules no longer configured", gone)

    async def _adopt(self, conn: AsyncConnection[Any], owns: Callable[[str], bool] | None = None) -> None:
        """The stored alerts of the groups this engine evaluates (`owns(group)`; None: every group)."""
        stored = await store.load_instances(conn)
        self.instances = {fp: i for fp, i in stored.items() if owns is None or owns(i.rule_group)}
        self._stored = dict(self.instances)

    async def evaluate(
        self, conn: AsyncConnection[Any], group: Group, now: dt.datetime | None = None
    ) -> list[RuleResult]:
        now = now or _now()
        facts = {**self.rack_facts, **(self.facts() if self.facts else {})}
        results = await evaluate_group(conn, group, self.query_timeout_s, facts)
        changed_all, dropped_all = [], []
        for result in results:
            mine = {
                fp: i
                for fp, i in self.instances.items()
                if i.rule_group == group.name and i.alertname == result.rule.alert
            }
            changed, dropped = state.transition(group.name, result, mine, now)
            changed_all += changed
            dropped_all += dropped
            self._report(group.name, result)
        to_write = [i for i in changed_all if state.worth_writing(i, self._stored.get(i.fingerprint))]
        async with conn.transaction():
            await store.save_instances(conn, to_write, dropped_all)
            await store.save_rule_status(conn, group.name, results, now)
        for inst in changed_all:
            self.instances[inst.fingerprint] = inst
        for inst in to_write:
            self._stored[inst.fingerprint] = inst
        for fp in dropped_all:
            self.instances.pop(fp, None)
            self._stored.pop(fp, None)
        return results

    async def notify(self, conn: AsyncConnection[Any], now: dt.datetime | None = None) -> int:
        """Queue the notifications due (nothing without a notification config)."""
        now = now or _now()
        self._forget_resolved(now)
        if self.config is None:
            return 0
        return await dispatch(conn, self.instances, self.config, now)

    def _forget_resolved(self, now: dt.datetime) -> None:
        for fp, inst in list(self.instances.items()):
            if inst.state == "resolved" and inst.resolved_at and now - inst.resolved_at > RESOLVED_IN_MEMORY:
                del self.instances[fp]
                self._stored.pop(fp, None)

    async def cycle(self, conn: AsyncConnection[Any], now: dt.datetime | None = None) -> list[RuleResult]:
        """Evaluate every group once and queue what is due (tests and the benchmark drive this)."""
        results = []
        for group in self.groups:
            results += await self.evaluate(conn, group, now)
        await self.notify(conn, now)
        return results

    def retry_s(self) -> float:
        """How often a follower tries to take over."""
        return max(self.tick_s * 4, 1.0)

    async def lead_shards(self, lease: ShardLease, dsn: str) -> None:
        """Run as one of the engines (alerts/part.py): evaluate the groups of the shards `lease` holds,
        and, while it holds DISPATCH_SHARD, queue and deliver every group's notifications."""
        conn = lease.conn
        await self._resolve_gone_rules(conn)
        held: frozenset[int] | None = None
        next_due: dict[str, dt.datetime] = {}
        deliverer: asyncio.Task[None] | None = None
        last_balance = last_cleanup = last_notify = -math.inf
        try:
            while True:
                if time.monotonic() - last_balance >= REBALANCE_S:
                    last_balance = time.monotonic()
                    if (now_held := await lease.rebalance()) != held:
                        held = now_held
                        await self._adopt(conn, lease.owns)
                        next_due = {g.name: next_due.get(g.name, _now()) for g in self.groups if lease.owns(g.name)}
                    dispatching = DISPATCH_SHARD in held
                    if dispatching and deliverer is None:
                        deliverer = asyncio.create_task(self._deliver(dsn), name="alert-delivery")
                    elif not dispatching and deliverer is not None:
                        deliverer.cancel()
                        await asyncio.gather(deliverer, return_exceptions=True)
                        deliverer = None
                if deliverer is not None and deliverer.done():
                    deliverer.result()  # re-raise what ended it
                evaluated = await self._evaluate_due(conn, next_due)
                if evaluated or time.monotonic() - last_notify >= 1.0:
                    self._forget_resolved(_now())
                    if deliverer is not None:
                        await self.notify_stored(conn)
                    last_notify = time.monotonic()
                if deliverer is not None and time.monotonic() - last_cleanup > 3600:
                    await self._cleanup(conn)
                    last_cleanup = time.monotonic()
                await asyncio.sleep(self.tick_s)
        finally:
            if deliverer is not None:
                deliverer.cancel()
                await asyncio.gather(deliverer, return_exceptions=True)

    async def _evaluate_due(self, conn: AsyncConnection[Any], next_due: dict[str, dt.datetime]) -> bool:
        """Evaluate the groups in `next_due` whose time has come; whether any was."""
        evaluated = False
        for group in self.groups:
            if group.name not in next_due:
                continue
            scheduled, now = next_due[group.name], _now()
            if now >= scheduled:
                interval = dt.timedelta(seconds=group.interval_s)
                next_due[group.name] = scheduled + interval
                if next_due[group.name] <= now:  # fell behind: skip the missed runs
                    scheduled, next_due[group.name] = now, now + interval
                await self.evaluate(conn, group, scheduled)
                evaluated = True
        return evaluated

    async def notify_stored(self, conn: AsyncConnection[Any], now: dt.datetime | None = None) -> int:
        """Queue the notifications due over every engine's alerts, as stored."""
        if self.config is None:
            return 0
        return await dispatch(conn, await store.load_instances(conn), self.config, now or _now())

    async def _deliver(self, dsn: str) -> None:
        if self.config is None:
            return
        async with (
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn,
            httpx.AsyncClient(follow_redirects=False) as client,
        ):
            delivery = Delivery(self.config, client)
            while True:
                await _finish_when_cancelled(delivery.run_once(conn))
                await asyncio.sleep(min(self.tick_s, 0.25))

    async def _cleanup(self, conn: AsyncConnection[Any]) -> None:
        await store.cleanup(conn, _now() - HISTORY)

    def _report(self, group: str, result: RuleResult) -> None:
        key = (group, result.rule.alert)
        if result.error != self._errors.get(key):
            if result.error:
                log.warning("alert rule %s/%s failed: %s", group, result.rule.alert, result.error)
            elif key in self._errors:
                log.info("alert rule %s/%s works again", group, result.rule.alert)
        self._errors[key] = result.error


async def _finish_when_cancelled(pass_: Coroutine[Any, Any, int]) -> None:
    """Run one delivery pass to its end even when the engine is stopped during it: a notification
    posted but not yet marked sent would be posted again by the next dispatcher (a rolling restart or
    a shard moving would repeat it). A pass is bounded by the post timeout, so stopping waits at most
    that long; the shard lease is held until then, so no other engine delivers meanwhile."""
    running = asyncio.ensure_future(pass_)
    try:
        await asyncio.shield(running)
    except asyncio.CancelledError:
        await asyncio.wait({running}, timeout=post.TIMEOUT_S + 5)
        running.cancel()  # still running only if the database stopped answering
        raise


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
