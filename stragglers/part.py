"""The straggler watch as a collector part: a leader task, run in one collector at a time."""

from __future__ import annotations

import asyncio
from typing import Any

from psycopg import AsyncConnection

from gpuscope.collector.parts import LeaderTask, Part
from gpuscope.stragglers.watch import LOCK_KEY, StragglerWatch


def stragglers_part(every_s: float = 15.0) -> Part:
    watcher = StragglerWatch()  # one per collector: it keeps what it knows across a lost and regained lead

    async def watch(conn: AsyncConnection[Any], dsn: str) -> None:
        while True:
            await watcher.cycle(conn)
            await asyncio.sleep(every_s)

    # Followers retry well within one watch interval, so a new leader is found before the next cycle.
    return Part(
        name="stragglers", leader_tasks=(LeaderTask("straggler watch", LOCK_KEY, watch, min(every_s / 3, 5.0)),)
    )
