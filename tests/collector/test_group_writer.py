"""Group commit: batches stored together in one transaction, and one bad batch does not sink the rest."""

from __future__ import annotations

import asyncio
import time
import uuid

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from gpuscope.collector.ingest.wire import decode
from gpuscope.collector.store.group_writer import GroupWriter
from gpuscope.collector.store.writer import InventoryCache
from gpuscope.exporter.sim import JobSchedule, SimNodeSource, build_topology
from gpuscope.exporter.snapshot import Snapshot
from gpuscope.exporter.wire import Origin, encode_batch
from tests.conftest import count_rows


def batch_for(node: str, seq: int = 1, exporter_id: str | None = None):  # type: ignore[no-untyped-def]
    import orjson

    topology = build_topology(1, 2, 1, cluster="group")
    now = time.time() - 5
    gpus, ports = SimNodeSource(topology[0], JobSchedule(topology, 1), 1).read(now)
    doc = encode_batch(
        Origin("group", "r", node, "sim", exporter_id or str(uuid.uuid4())),
        seq,
        [Snapshot(ts=now, gpus=gpus, ports=ports)],
    )
    return decode(orjson.dumps(doc), time.time())


async def store_all(dsn: str, batches: list) -> list:  # type: ignore[type-arg]
    async with AsyncConnectionPool(dsn, min_size=1, max_size=2, open=False) as pool:
        await pool.open(wait=True)
        writer = GroupWriter(pool, InventoryCache(), writers=1)
        try:
            return await asyncio.gather(*(writer.store(b) for b in batches), return_exceptions=True)
        finally:
            await writer.close()


def test_concurrent_batches_are_stored_and_duplicates_recognised(dsn: str) -> None:
    twice = str(uuid.uuid4())
    batches = [batch_for(f"n{i}") for i in range(10)] + [batch_for("n0", 7, twice), batch_for("n0", 7, twice)]
    results = asyncio.run(store_all(dsn, batches))
    assert [r.duplicate for r in results] == [False] * 11 + [True]
    assert count_rows(dsn, "gpu_sample") == 11 * 2 and count_rows(dsn, "ingest_batch") == 11


def test_one_bad_batch_fails_alone(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION refuse_bad() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " IF (SELECT name FROM node WHERE node_id = NEW.node_id) = 'bad' THEN RAISE EXCEPTION 'refused'; END IF;"
            " RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse_bad BEFORE INSERT ON ingest_batch FOR EACH ROW EXECUTE FUNCTION refuse_bad()"
        )
    results = asyncio.run(store_all(dsn, [batch_for("good-1"), batch_for("bad"), batch_for("good-2")]))
    assert isinstance(results[1], psycopg.Error)
    assert [r.duplicate for r in (results[0], results[2])] == [False, False]
    assert count_rows(dsn, "gpu_sample") == 4, "both good batches stored, nothing of the bad one"
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM node WHERE name = 'bad'").fetchone() == (0,)


def test_a_bug_fails_the_requests_instead_of_hanging(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuscope.collector.store import group_writer

    async def broken(*_args: object) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr(group_writer, "store_batches", broken)
    [result] = asyncio.run(asyncio.wait_for(store_all(dsn, [batch_for("n")]), 10))
    assert isinstance(result, RuntimeError)
