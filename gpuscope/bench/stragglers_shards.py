"""The straggler watch's cycle split over K collector processes (`bench scale --collectors K`): each
worker process holds a shard lease on the bench's database, as a collector does (core/shards.py), and
watches only its shards' jobs. The shards are balanced first (16 over K); then all K run each cycle at
the same moment, as K collectors do every 5 s, and the cycle's time is the slowest worker's. Each
worker's own times are kept too: the target is 5 s / K per shard."""

from __future__ import annotations

import asyncio
import multiprocessing
import statistics
import time
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import Connection
from typing import Any

import psycopg

from gpuscope.bench.stragglers_cycle import SAMPLE_S, Arrive
from gpuscope.core.shards import SHARDS, ShardLease
from gpuscope.stragglers.detector import Settings
from gpuscope.stragglers.watch import LOCK_KEY, StragglerWatch

BALANCE_ROUNDS = 5  # rebalances before timing: shares settle in two or three


def measure(dsn: str, now: datetime, arrive: Arrive, cycles: int, collectors: int) -> dict[str, Any]:
    """As stragglers_cycle.measure, over `collectors` worker processes."""
    context = multiprocessing.get_context("spawn")  # no forked event loop or connection
    pipes, workers = [], []
    for n in range(collectors):
        mine, theirs = context.Pipe()
        worker = context.Process(target=_worker, args=(dsn, theirs), name=f"straggler shard {n}", daemon=True)
        worker.start()
        pipes.append(mine)
        workers.append(worker)
    try:
        for pipe in pipes:
            pipe.recv()  # joined
        held: list[float] = []
        for _ in range(BALANCE_ROUNDS):
            held = _all(pipes, ("rebalance",))
        if sum(held) != SHARDS:
            raise RuntimeError(f"shards not settled over {collectors} workers: {held}")
        replay = _all(pipes, ("cycle", (now + timedelta(seconds=1)).timestamp()))
        per_cycle: list[list[float]] = []
        with psycopg.connect(dsn, autocommit=True) as loader:
            for i in range(cycles):
                bucket = now + timedelta(seconds=SAMPLE_S * i)
                arrive(loader, bucket)
                per_cycle.append(_all(pipes, ("cycle", (bucket + timedelta(seconds=1)).timestamp())))
        jobs = _all(pipes, ("jobs",))
        _all(pipes, ("stop",))
    finally:
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.kill()
    slowest = [max(times) for times in per_cycle]
    return {
        "collectors": collectors,
        "jobs": int(sum(jobs)),
        "jobs_per_collector": [int(j) for j in jobs],
        "shards_per_collector": [int(h) for h in held],
        "replay_s": round(max(replay), 2),
        "straggler_cycle_s": round(statistics.median(slowest), 3),
        "straggler_cycle_max_s": round(max(slowest), 3),
        "straggler_shard_cycle_s": [round(statistics.median(times), 3) for times in zip(*per_cycle, strict=True)],
        "jobs_fed_to_the_last_bucket": True,  # each worker checks its own below
    }


def _all(pipes: list[Connection], command: tuple[Any, ...]) -> list[float]:
    """Send `command` to every worker at once; their answers, in order."""
    for pipe in pipes:
        pipe.send(command)
    answers = [pipe.recv() for pipe in pipes]
    for answer in answers:
        if isinstance(answer, str):
            raise RuntimeError(f"a straggler shard worker failed: {answer}")
    return answers


def _worker(dsn: str, pipe: Connection) -> None:
    asyncio.run(_serve(dsn, pipe))


async def _serve(dsn: str, pipe: Connection) -> None:
    watch = StragglerWatch(Settings(sample_s=SAMPLE_S, warmup_s=60.0))  # as stragglers_cycle.measure's
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        lease = ShardLease(conn, LOCK_KEY, "bench straggler watch")
        await lease.join()
        pipe.send(0.0)
        while True:
            command = pipe.recv()
            try:
                if command[0] == "rebalance":
                    pipe.send(float(len(await lease.rebalance())))
                elif command[0] == "cycle":
                    t0 = time.perf_counter()
                    await watch.cycle(conn, datetime.fromtimestamp(command[1], UTC), owns=lease.owns)
                    pipe.send(time.perf_counter() - t0)
                elif command[0] == "jobs":
                    fed = {job.cursor for job in watch.jobs.values()}
                    pipe.send(float(len(watch.jobs)) if len(fed) <= 1 else "jobs not fed to the same bucket")
                else:
                    pipe.send(0.0)
                    return
            except Exception as exc:  # told to the parent, which stops the bench with it
                pipe.send(f"{type(exc).__name__}: {exc}")
                return
