"""One-minute rollups fed by ingest: minutes marked in the batch's transaction, rolled up once settled."""

from __future__ import annotations

import asyncio
import time

import psycopg

from gpuscope.collector.store import rollups
from tests.collector.helpers import batch_at, post
from tests.processes import RunningCollector


def test_ingested_minutes_are_marked_and_rolled_up_once_settled(collector: RunningCollector) -> None:
    ten_minutes_ago = (time.time() // 60 - 10) * 60 + 30
    assert post(collector, batch_at(ten_minutes_ago, 1)).status_code == 200
    assert post(collector, batch_at(time.time() - 1, 2)).status_code == 200  # this minute: not settled yet

    async def roll() -> int:
        async with await psycopg.AsyncConnection.connect(collector.dsn, autocommit=True) as conn:
            return await rollups.roll_up(conn)

    assert asyncio.run(roll()) == 1
    with psycopg.connect(collector.dsn) as conn:
        rows = conn.execute(
            "SELECT extract(epoch FROM bucket)::bigint, samples, util_n, power_n FROM gpu_rollup_1m"
        ).fetchall()
        pending = conn.execute("SELECT count(*) FROM rollup_dirty_minute").fetchone()
    assert sorted(rows) == [(int(ten_minutes_ago // 60 * 60), 1, 1, 1)] * 2  # two GPUs, one sample each
    assert pending == (1,), "the current minute waits until it settles"
