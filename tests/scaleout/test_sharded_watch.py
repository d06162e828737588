"""The straggler watch sharded by job across collectors (core/shards.py): three watches on one database,
one of them gone mid-run, store the same stragglers as one watch alone on the same data: none twice,
none missing. Then three real collector processes: the shards spread over all three, and a SIGKILLed
one's are taken by the others within 10 s."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gpuscope.core.listen import free_loopback_port
from gpuscope.core.shards import SHARDS, ShardLease
from gpuscope.exporter.sim.training import Fault, TrainingJob, simulate
from gpuscope.stragglers.watch import LOCK_KEY, StragglerWatch
from tests import commands
from tests.commands import stop_process
from tests.processes import RunningCollector, running_collector
from tests.stragglers.helpers import HISTORY_S, JOB, push
from tests.waiting import eventually

FAULTS = {  # a straggler of several kinds, at different times, and clean jobs
    "a-thermal": [Fault("thermal", 1, 2, onset_s=1500.0, end_s=2100.0, severity=0.2)],
    "b-power": [Fault("power_cap", 0, 1, onset_s=1300.0, end_s=1900.0, severity=0.2)],
    "c-nic": [Fault("slow_nic", 1, None, onset_s=1600.0, end_s=2200.0, severity=0.3)],
    "d-thermal-late": [Fault("thermal", 0, 3, onset_s=1900.0, end_s=2300.0, severity=0.2)],
    "e-clean": [],
    "f-clean": [],
}
STEP = timedelta(seconds=60)
STORED = (
    "SELECT s.job_id, g.uuid, s.cause, s.ended_at IS NOT NULL FROM straggler s LEFT JOIN gpu g USING (gpu_id)"
    " ORDER BY 1, 2, 3"
)


@pytest.fixture
def collector(dsn: str) -> Iterator[RunningCollector]:
    """A collector that only takes the samples: the watches under test are this test's own."""
    with running_collector(dsn, stragglers=False) as running:
        yield running


@pytest.fixture
def pushed(collector: RunningCollector) -> datetime:
    start = time.time() - HISTORY_S - 20
    for n, (job_id, faults) in enumerate(FAULTS.items()):
        shape = TrainingJob(JOB.nodes, JOB.gpus_per_node, seed=20 + n)
        push(collector, simulate(shape, faults, HISTORY_S), start, job_id)
    return datetime.fromtimestamp(start, UTC)


def test_three_sharded_watches_one_gone_store_what_one_watch_stores(
    collector: RunningCollector, pushed: datetime
) -> None:
    times = [pushed + timedelta(seconds=1200) + k * STEP for k in range(int((HISTORY_S - 1200) / 60) + 2)]
    alone = asyncio.run(_run_alone(collector.dsn, times))
    assert len(alone) >= 4, alone  # the four faults were found (the comparison below means something)
    _forget_stragglers(collector.dsn)
    gone_at = times[len(times) // 2]  # mid-run: some stragglers declared, some still to come or to end
    sharded, moved = asyncio.run(_run_sharded(collector.dsn, times, gone_at))
    assert moved, "the gone watch led some of the jobs (its shards had to move)"
    assert sharded == alone


def test_shards_spread_over_three_collectors_and_a_killed_ones_are_taken(dsn: str, tmp_path: Path) -> None:
    with _collectors(dsn, tmp_path, 3) as processes:
        pids = {p.pid for p in processes}
        spread = eventually(lambda: _spread(dsn, pids, 3), what="the shards spread over three collectors", timeout=30)
        victim = max(spread, key=lambda pid: len(spread[pid]))
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        after = eventually(lambda: _spread(dsn, pids - {victim}, 2), what="the shards taken over", timeout=20)
        took = time.monotonic() - killed
    assert took <= 10.0, f"taken over after {took:.1f} s"
    assert set().union(*after.values()) == set(range(SHARDS))
    print(f"shards {[len(s) for s in spread.values()]} -> {[len(s) for s in after.values()]}; taken in {took:.1f} s")


async def _run_alone(dsn: str, times: list[datetime]) -> list[tuple[Any, ...]]:
    watcher = StragglerWatch()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for now in times:
            await watcher.cycle(conn, now)
    return _stored(dsn)


async def _run_sharded(dsn: str, times: list[datetime], gone_at: datetime) -> tuple[list[tuple[Any, ...]], bool]:
    leases = []
    for _ in range(3):
        lease = ShardLease(await psycopg.AsyncConnection.connect(dsn, autocommit=True), LOCK_KEY, "straggler watch")
        await lease.join()
        leases.append(lease)
    watchers = [StragglerWatch() for _ in leases]
    moved = False
    try:
        for now in times:
            if now >= gone_at and not moved:  # the watch leading the most of the faulty jobs goes
                gone = max(leases, key=lambda lease: sum(lease.owns(job) for job in FAULTS if FAULTS[job]))
                moved = any(gone.owns(job) for job in FAULTS)
                await gone.conn.close()  # that collector is gone, and what it knew with it
            for lease, watcher in zip(leases, watchers, strict=True):
                if lease.conn.closed:
                    continue
                await lease.rebalance()
                await watcher.cycle(lease.conn, now, owns=lease.owns)
    finally:
        for lease in leases:
            await lease.conn.close()
    return _stored(dsn), moved


def _stored(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(STORED).fetchall()


def _forget_stragglers(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM straggler")
        conn.execute("DELETE FROM straggler_job_model")


def _spread(dsn: str, pids: set[int], members: int) -> dict[int, set[int]] | None:
    """Each collector's shards of the watch when exactly `members` of `pids` hold some and all are held."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT a.application_name, ((l.classid::bigint << 32) | l.objid::bigint) - %s - 1"
            " FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
            " WHERE l.locktype = 'advisory' AND l.granted AND l.mode = 'ExclusiveLock'"
            " AND ((l.classid::bigint << 32) | l.objid::bigint) BETWEEN %s AND %s",
            (LOCK_KEY, LOCK_KEY + 1, LOCK_KEY + SHARDS),
        ).fetchall()
    held: dict[int, set[int]] = {}
    for name, shard in rows:  # collectors name their lease connections "gpuscope straggler watch pid N"
        held.setdefault(int(name.rsplit(" ", 1)[1]), set()).add(shard)
    if set(held) != pids or len(held) != members or sum(len(s) for s in held.values()) != SHARDS:
        return None
    return held


@contextlib.contextmanager
def _collectors(dsn: str, tmp_path: Path, count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`count` real collectors on one database, their watches every second."""
    processes: list[subprocess.Popen[bytes]] = []
    try:
        token = tmp_path / "token"
        token.write_text("t" * 32 + "\n")
        for _ in range(count):
            extra = ("--straggler-interval-s", "1", "--no-alerts")
            processes.append(commands.start_collector(dsn, free_loopback_port(), token, *extra))
        yield processes
    finally:
        for process in processes:
            stop_process(process)


def test_a_straggler_whose_job_ended_unwatched_is_ended(collector: RunningCollector) -> None:
    """A job's watch gone (its shard moved, its collector died) while its straggler was open, and the job
    ended before any watch followed it again: the next watch to lead its shard ends the row, at the
    job's end."""
    start = time.time() - HISTORY_S - 20
    fault = Fault("thermal", 1, 2, onset_s=1500.0, end_s=HISTORY_S + 600, severity=0.2)  # still on at the end
    push(collector, simulate(TrainingJob(JOB.nodes, JOB.gpus_per_node, seed=41), [fault], HISTORY_S), start, "left-1")
    now = datetime.fromtimestamp(start + HISTORY_S + 20, UTC)
    asyncio.run(_run_alone(collector.dsn, [now]))
    assert [row[3] for row in _stored(collector.dsn)] == [False], "an open straggler"
    with psycopg.connect(collector.dsn, autocommit=True) as conn:
        conn.execute("UPDATE job_allocation SET ended_at = %s WHERE job_id = 'left-1'", (now,))
    asyncio.run(_run_alone(collector.dsn, [now + timedelta(seconds=30)]))  # another watch, the job gone
    with psycopg.connect(collector.dsn) as conn:
        ended = conn.execute("SELECT ended_at FROM straggler WHERE job_id = 'left-1'").fetchall()
    assert ended == [(now,)]
