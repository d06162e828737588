"""Group commit under contention: two transactions holding the same batches (retries of each other's, as
after a SIGCONT or a replayed spool) or batches of the same nodes, in other orders, must not deadlock.
Rows are taken in one global order (writer.lock_order). A trigger that pauses on every batch marker
widens the window in which the old code's opposite orders met head on (PostgreSQL's deadlock detector
then aborted one of them)."""

from __future__ import annotations

import asyncio
import random

import psycopg
from psycopg_pool import AsyncConnectionPool

from gpuscope.collector.store.writer import InventoryCache, store_batches
from tests.collector.test_group_writer import batch_for
from tests.conftest import count_rows

SLOW_MARKERS = (
    "CREATE FUNCTION slow_marker() RETURNS trigger LANGUAGE plpgsql AS"
    " $$ BEGIN PERFORM pg_sleep(0.05); RETURN NEW; END $$",
    "CREATE TRIGGER slow_marker BEFORE INSERT ON ingest_batch FOR EACH ROW EXECUTE FUNCTION slow_marker()",
)


async def store_concurrently(dsn: str, groups: list[list]) -> list:  # type: ignore[type-arg]
    """Each group in a transaction of its own, all at once (no group writer: no retry hides a deadlock)."""
    async with AsyncConnectionPool(dsn, min_size=len(groups), max_size=len(groups), open=False) as pool:
        await pool.open(wait=True)
        cache = InventoryCache()
        return await asyncio.gather(*(store_batches(pool, group, cache) for group in groups), return_exceptions=True)


def test_the_same_batches_in_opposite_orders_do_not_deadlock(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in SLOW_MARKERS:
            conn.execute(statement)
    batches = [batch_for(f"n{i}") for i in range(6)]
    results = asyncio.run(store_concurrently(dsn, [batches, batches[::-1], batches[3:] + batches[:3]]))
    failures = [r for r in results if isinstance(r, BaseException)]
    assert not failures, failures
    fresh = [sum(not r.duplicate for r in group) for group in results]  # type: ignore[union-attr]
    assert sum(fresh) == len(batches), "each batch stored by exactly one of the transactions"
    assert count_rows(dsn, "ingest_batch") == len(batches) and count_rows(dsn, "gpu_sample") == 2 * len(batches)


def test_interleaved_and_duplicate_groups_store_each_row_once(dsn: str) -> None:
    """Many groups of shuffled retries and new batches of the same nodes, at once, several rounds."""
    rng = random.Random(7)
    stored_batches = 0
    for round_ in range(5):
        batches = [
            batch_for(f"node-{i % 4}", seq=round_ * 100 + i, exporter_id=f"00000000-0000-0000-0000-00000000000{i % 4}")
            for i in range(16)
        ]
        groups = [rng.sample(batches, 10) for _ in range(4)]
        results = asyncio.run(store_concurrently(dsn, groups))
        assert not [r for r in results if isinstance(r, BaseException)], results
        stored_batches += len({id(b) for group in groups for b in group})
    assert count_rows(dsn, "ingest_batch") == stored_batches
    with psycopg.connect(dsn) as conn:
        total, distinct = conn.execute("SELECT count(*), count(DISTINCT (gpu_id, ts)) FROM gpu_sample").fetchone()  # type: ignore[misc]
    assert total == distinct == 2 * stored_batches
