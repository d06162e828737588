"""Three hours of two GPUs sampled every 20 s, one of them skipping some samples (so that minutes hold
different numbers of samples and a mean of minute means would differ from the exact mean): the data the
rollup tiers and the bucket policy are checked on."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import psycopg

from gpuscope.collector.store import rollups

T0 = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)
HOURS = 3


def sample_three_hours(connection: psycopg.Connection[Any]) -> None:
    connection.execute(
        "CREATE TABLE gpu_sample_p20261101 PARTITION OF gpu_sample"
        " FOR VALUES FROM ('2026-11-01 00:00+00') TO ('2026-11-02 00:00+00')"
    )
    connection.execute("INSERT INTO node (cluster, name, rack) VALUES ('c', 'n1', 'r1')")
    for index in range(2):
        connection.execute(
            "INSERT INTO gpu (node_id, gpu_index, uuid, model, pci_bus_id) VALUES (1, %s, %s, 'H100', 'x')",
            (index, f"GPU-{index}"),
        )
    connection.execute(
        "INSERT INTO gpu_sample (ts, gpu_id, up, util_pct, power_w)"
        " SELECT %s + s * interval '1 second', g, true, (s / 20) %% 97, 300 + g"
        " FROM generate_series(0, %s - 20, 20) AS s, generate_series(1, 2) AS g WHERE g = 1 OR s %% 140 <> 0",
        (T0, HOURS * 3600),
    )


def roll_up(dsn: str, now: datetime) -> None:
    """Every minute with samples rolled up to minutes and hours, as the maintenance loop would by `now`."""

    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(
                "INSERT INTO rollup_dirty_minute SELECT DISTINCT date_bin('1 minute', ts, 'epoch') FROM gpu_sample"
                " ON CONFLICT DO NOTHING"
            )
            while await rollups.roll_up(conn, now):
                pass

    asyncio.run(run())
