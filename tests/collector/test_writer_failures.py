"""A group's transaction (store/writer.py): a statement that fails after the COPY, or COMMIT itself
(a deferred trigger), must leave nothing stored, the batch unmarked (its retry is stored, not taken for a
duplicate) and the connection fit for the next group."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from gpuscope.collector.store.writer import InventoryCache, StoreResult, store_batch
from tests.collector.test_group_writer import batch_for
from tests.conftest import count_rows

REFUSE = "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$"
# node_seen is written after the COPY, in the pipeline that ends with COMMIT.
AFTER_THE_COPY = "CREATE TRIGGER refuse BEFORE INSERT ON node_seen FOR EACH ROW EXECUTE FUNCTION refuse()"
# A deferred constraint trigger fires at COMMIT: the COMMIT is what fails.
AT_COMMIT = (
    "CREATE CONSTRAINT TRIGGER refuse AFTER INSERT ON ingest_batch DEFERRABLE INITIALLY DEFERRED"
    " FOR EACH ROW EXECUTE FUNCTION refuse()"
)


async def _refused_then_stored(dsn: str, drop: str) -> tuple[BaseException | None, StoreResult, StoreResult]:
    batch = batch_for("pipelined")
    cache = InventoryCache()
    async with AsyncConnectionPool(dsn, min_size=1, max_size=1, open=False) as pool:
        await pool.open(wait=True)
        refused: BaseException | None = None
        try:
            await store_batch(pool, batch, cache)
        except psycopg.Error as exc:
            refused = exc
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(drop)
        # the same (only) connection of the pool, back from the failed group: it must be idle and usable
        stored = await store_batch(pool, batch, cache)
        again = await store_batch(pool, batch, cache)
    return refused, stored, again


@pytest.mark.parametrize(
    ("trigger", "drop"),
    [(AFTER_THE_COPY, "DROP TRIGGER refuse ON node_seen"), (AT_COMMIT, "DROP TRIGGER refuse ON ingest_batch")],
    ids=["statement-after-copy", "commit"],
)
def test_a_failure_after_the_copy_stores_nothing(dsn: str, trigger: str, drop: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(REFUSE)
        conn.execute(trigger)
    refused, stored, again = asyncio.run(_refused_then_stored(dsn, drop))
    assert isinstance(refused, psycopg.errors.RaiseException) and "refused" in str(refused)
    # the refused attempt left nothing: the retry is the one stored, once
    assert not stored.duplicate and stored.gpu_rows == 2
    assert again.duplicate
    assert count_rows(dsn, "gpu_sample") == 2 and count_rows(dsn, "ingest_batch") == 1
