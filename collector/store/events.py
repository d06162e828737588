"""Events that arrive with a batch, stored in the batch's transaction (so a retried batch adds none)."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from gpuscope.collector.store.batch import Batch


async def record(conn: AsyncConnection[Any], node_id: int, gpu_ids: dict[int, int], batch: Batch) -> None:
    if not batch.events:
        return
    await conn.execute(
        "INSERT INTO event (ts, node_id, gpu_id, kind, code, count, message)"
        " SELECT to_timestamp(ts), %s, gpu, kind, code, n, message"
        " FROM unnest(%s::float8[], %s::int[], %s::text[], %s::int[], %s::int[], %s::text[])"
        "      AS e (ts, gpu, kind, code, n, message)",
        (
            node_id,
            [e.ts for e in batch.events],
            [None if e.gpu is None else gpu_ids[e.gpu] for e in batch.events],
            [e.kind for e in batch.events],
            [e.code for e in batch.events],
            [e.count for e in batch.events],
            [e.message for e in batch.events],
        ),
    )
