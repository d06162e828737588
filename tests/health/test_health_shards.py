"""The health loop sharded by node over a real PostgreSQL: two loops on two shard leases (two collectors)
judge each its own nodes and together do exactly what one loop alone does; the guard rails stay the
fleet's (two loops deciding at once take the last allowed drain once); a shard that moves is judged by
its new leader from a fresh lookback, so nothing found while it moved is lost; and a check under way
when its node's shard moves is called off, the new leader checking the node once more."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from gpuscope.core.shards import SHARDS, ShardLease, shard_of
from gpuscope.health.loop import LOCK_KEY, CycleReport, EveryNode, HealthLoop
from gpuscope.health.schedulers.base import Outcome, Scheduler, SchedulerNode
from tests.health.api_server import node
from tests.health.fleet import NAMES, Fleet
from tests.health.helpers import at

Pair = tuple[ShardLease, HealthLoop]


@asynccontextmanager
async def two_leases(dsn: str) -> AsyncIterator[tuple[ShardLease, ShardLease]]:
    """Two members of the health loop's lease: the first joined alone and took every shard, then gave the
    upper half (8..15) to the second, as core/shards.py balances them: which node is whose is then fixed."""
    first = ShardLease(await psycopg.AsyncConnection.connect(dsn, autocommit=True), LOCK_KEY, "health loop")
    second = ShardLease(await psycopg.AsyncConnection.connect(dsn, autocommit=True), LOCK_KEY, "health loop")
    try:
        await first.join()
        await first.rebalance()
        await second.join()
        await first.rebalance()
        await second.rebalance()
        assert first.held | second.held == frozenset(range(SHARDS)) and not first.held & second.held
        yield first, second
    finally:
        await first.conn.close()
        await second.conn.close()


async def rounds(pairs: Iterable[Pair], *seconds: float) -> list[list[CycleReport]]:
    """For each time: every lease still open rebalances, then its loop cycles, all loops at once."""
    out = []
    for t in seconds:
        live = [(lease, loop) for lease, loop in pairs if not lease.conn.closed]
        for lease, _ in live:
            await lease.rebalance()
        out.append(list(await asyncio.gather(*(loop.cycle(lease.conn, at(t), shards=lease) for lease, loop in live))))
        await asyncio.sleep(0.2)  # a validation command finishes
    return out


async def takes_every_shard(lease: ShardLease) -> None:
    """Rebalance until the lease holds every shard: a closed member's backend lets go of its locks soon
    after, not at once."""
    for _ in range(100):
        if await lease.rebalance() == frozenset(range(SHARDS)):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"still {sorted(lease.held)} of {SHARDS} shards 10 s after the other member left")


def owned(fleet: Fleet, lease: ShardLease) -> list[str]:
    return [name for name in NAMES if lease.owns(str(fleet.nodes[name]))]


def history(fleet: Fleet) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Every transition and every action, by node name, in an order that does not depend on who wrote first."""
    conn = fleet.telemetry.conn
    moves = conn.execute(
        "SELECT n.name, t.at, t.from_state, t.to_state, t.reason, t.actor FROM health_transition t"
        " JOIN node n USING (node_id)"
    ).fetchall()
    actions = conn.execute(
        "SELECT n.name, a.at, a.action, a.dry_run, a.ok, a.detail FROM health_action a JOIN node n USING (node_id)"
    ).fetchall()
    return sorted(moves), sorted(actions)


def forget_health(fleet: Fleet) -> None:
    """Back to before the first cycle: no health rows, every node schedulable in the stand-in."""
    for table in ("health_action", "health_transition", "health_node", "health_evidence"):
        fleet.telemetry.conn.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(table)))
    with fleet.server.lock:
        fleet.server.nodes = {name: node(name) for name in NAMES}


def test_two_sharded_loops_judge_each_their_nodes_and_together_do_what_one_loop_does(fleet: Fleet) -> None:
    fleet.xid("n1", 3, 100, 79)
    fleet.xid("n2", 1, 100, 79)
    for t, code in ((100, 9001), (200, 9002), (300, 9003)):  # suspect, then unhealthy at the third
        fleet.xid("n3", 0, t, code)
    fleet.xid("n4", 0, 100, 13)  # the application's own: kept, moves nothing
    times = (140, 240, 340, 1050, 1060)  # n3 refused at 340 (2 out), drained once n1 and n2 are back
    fleet.run(fleet.live(max_drained=2), *times)
    alone = history(fleet)
    assert any(a[2] == "refused" for a in alone[1]) and [m[3] for m in alone[0]].count("drained") == 3
    forget_health(fleet)

    async def sharded() -> list[list[CycleReport]]:
        async with two_leases(fleet.dsn) as (first, second):
            pairs = [(first, fleet.live(max_drained=2)), (second, fleet.live(max_drained=2))]
            reports = await rounds(pairs, *times)
            for (lease, _), judged in zip(pairs, zip(*reports, strict=True), strict=True):
                nodes = {move.node_id for report in judged for move in report.transitions}
                assert nodes and all(lease.owns(str(n)) for n in nodes), "each loop judges its own nodes"
            return reports

    asyncio.run(sharded())
    together = history(fleet)
    assert together[0] == alone[0], "the same transitions, none twice, none missing"
    assert together[1] == alone[1], "the same actions, none twice, none missing"


class SlowDrains:
    """A scheduler whose drain takes a while: two loops deciding at once both decide before either is done."""

    def __init__(self, inner: Scheduler) -> None:
        self.inner = inner
        self.name = inner.name

    def command(self, action: str, node: str, reason: str = "") -> str:
        return self.inner.command(action, node, reason)

    async def drain(self, node: str, reason: str) -> Outcome:
        await asyncio.sleep(0.3)
        return await self.inner.drain(node, reason)

    async def resume(self, node: str) -> Outcome:
        return await self.inner.resume(node)

    async def nodes(self, names: Iterable[str]) -> dict[str, SchedulerNode]:
        return await self.inner.nodes(names)


def test_two_loops_deciding_at_once_take_the_last_allowed_drain_once(fleet: Fleet) -> None:
    async def run() -> tuple[str, str]:
        async with two_leases(fleet.dsn) as (first, second):
            mine, theirs = owned(fleet, first)[0], owned(fleet, second)[0]
            fleet.xid(mine, 3, 100, 79)
            fleet.xid(theirs, 1, 100, 79)
            loops = [fleet.live(max_drained=1), fleet.live(max_drained=1)]
            for loop in loops:
                assert loop.scheduler is not None
                loop.scheduler = SlowDrains(loop.scheduler)
            await rounds([(first, loops[0]), (second, loops[1])], 140)
            return mine, theirs

    mine, theirs = asyncio.run(run())
    states = sorted([fleet.state(mine), fleet.state(theirs)])
    assert [s[0] for s in states] == ["drained", "unhealthy"], states
    assert states[1][1].startswith("drain refused: 1 node(s) already out of service by gpuscope, the policy allows 1")
    actions = sorted(a[0] for name in (mine, theirs) for a in fleet.actions(name))
    assert actions == ["drain", "refused"], "one drain, one refusal"
    assert sorted([fleet.cordoned(mine), fleet.cordoned(theirs)]) == [False, True]


def test_a_shard_that_moves_is_judged_by_the_survivor_with_nothing_lost(fleet: Fleet) -> None:
    async def run() -> None:
        async with two_leases(fleet.dsn) as (first, second):
            moving = owned(fleet, second)
            assert len(moving) >= 2, f"the second lease leads {moving}: the fleet's node ids moved"
            early, late = moving[:2]
            survivor = fleet.live()
            pairs = [(first, survivor), (second, fleet.live())]
            await rounds(pairs, 140)
            # Found while the second collector no longer cycles but still holds its shards: not the
            # survivor's to judge (nor to record: the finding is news to whoever records it).
            fleet.xid(early, 3, 200, 79)
            await rounds(pairs[:1], 300)
            assert fleet.state(early)[0] == "healthy"
            await second.conn.close()  # that collector is gone; its shards go at the survivor's rebalance
            await takes_every_shard(first)
            await rounds(pairs, 310)  # its window for the shards it took starts a lookback back: 200 is in it
            assert fleet.state(early)[0] == "drained", "a finding from before the move, in a window no one read"
            fleet.xid(late, 1, 320, 79)  # after the move
            await rounds(pairs, 400)
            assert fleet.state(late)[0] == "drained"

    asyncio.run(run())


@dataclass(frozen=True)
class Held:
    held: frozenset[int]
    shards: int = SHARDS


def test_a_check_under_way_when_its_shard_moves_is_called_off_and_run_again_by_the_new_leader(
    fleet: Fleet, tmp_path: Path
) -> None:
    ran = tmp_path / "checks"
    check = ("sh", "-c", f"sleep 0.5; echo {{node}} >> {ran}")  # it says so only once it has finished
    n1 = fleet.nodes["n1"]
    shard = shard_of(str(n1))
    fleet.xid("n1", 3, 100, 79)

    async def run() -> None:
        before, after = fleet.live(validate_command=check), fleet.live(validate_command=check)
        async with await psycopg.AsyncConnection.connect(fleet.dsn, autocommit=True) as conn:
            await before.cycle(conn, at(140), shards=EveryNode())
            await before.cycle(conn, at(1050), shards=EveryNode())
            assert fleet.state("n1")[0] == "validating"
            await before.cycle(conn, at(1051), shards=Held(frozenset(range(SHARDS)) - {shard}))  # given back
            await after.cycle(conn, at(1052), shards=Held(frozenset({shard})))  # the new leader checks again
            await asyncio.sleep(1.0)  # both checks would be done by now
            await after.cycle(conn, at(1060), shards=Held(frozenset({shard})))

    asyncio.run(run())
    assert ran.read_text().split() == ["n1"], "the first check was called off before it finished"
    assert [a[0] for a in fleet.actions("n1")] == ["drain", "validate", "resume"]
    assert fleet.state("n1")[0] == "healthy"
