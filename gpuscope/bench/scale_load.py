"""The scale bench's timeline. The alert rules read "now" from the database's clock, so the samples must
end at the wall clock when anything is measured: history is written newest first, from the wall clock
backwards one minute at a time (a backfill, as a replayed spool would write it), catching up with the
clock between minutes, until the time budget is spent; before each measurement the minutes since are
written and rolled up, as ingest and maintenance would have done meanwhile."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg

from gpuscope.bench.scale_fleet import STEP_S, Fleet, write
from gpuscope.collector.store import partitions, rollups

MAX_MINUTES = 6 * 60  # small fleets load fast: their history stops here (and within the partitions made)


@dataclass
class Timeline:
    oldest: float  # the first and last stamps written (seconds)
    newest: float
    rows: int = 0  # sample rows written
    rollup_s: float = 0.0  # time spent rolling up, and the minutes it rolled
    minutes_rolled: int = 0

    @property
    def minutes(self) -> float:
        return (self.newest - self.oldest + STEP_S) / 60

    @property
    def now(self) -> datetime:
        return datetime.fromtimestamp(self.newest, UTC)


def load(conn: psycopg.Connection[Any], fleet: Fleet, budget_s: float, min_minutes: int, max_bytes: int) -> Timeline:
    """At least `min_minutes` of history, more until `budget_s` is spent or the database holds `max_bytes`."""
    started = time.perf_counter()
    newest = _clock()
    timeline = Timeline(newest, newest, write(conn, fleet, np.array([newest])))
    while True:
        catch_up(conn, fleet, timeline)
        full = _database_bytes(conn) >= max_bytes or timeline.minutes >= MAX_MINUTES
        if full or (timeline.minutes >= min_minutes and time.perf_counter() - started >= budget_s):
            return timeline
        minute = timeline.oldest - STEP_S * np.arange(60 // STEP_S, 0, -1)
        timeline.rows += write(conn, fleet, minute)
        timeline.oldest = float(minute[0])


def catch_up(conn: psycopg.Connection[Any], fleet: Fleet, timeline: Timeline) -> None:
    """The samples the fleet has pushed since the newest written, up to the wall clock."""
    while (clock := _clock()) > timeline.newest:
        stamps = np.arange(timeline.newest + STEP_S, clock + 1, STEP_S)
        timeline.rows += write(conn, fleet, stamps)
        timeline.newest = float(stamps[-1])


def refresh(conn: psycopg.Connection[Any], dsn: str, fleet: Fleet, timeline: Timeline) -> None:
    """Up to date again: caught up, and the minutes settled since rolled up."""
    catch_up(conn, fleet, timeline)
    asyncio.run(roll_up(dsn, timeline))


async def roll_up(dsn: str, timeline: Timeline) -> None:
    """Maintenance's rollup passes until no settled minute is left."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        while done := await rollups.roll_up(conn):
            timeline.minutes_rolled += done
        timeline.rollup_s += time.perf_counter() - started


def make_partitions(dsn: str) -> None:
    """The days the history can reach (MAX_MINUTES back) and the next one."""
    now = datetime.now(UTC)
    days = {(now + timedelta(days=d)).date() for d in (-1, 0, 1)}

    async def ensure() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
            await partitions.ensure(conn, days | {(now - timedelta(minutes=MAX_MINUTES)).date()})

    asyncio.run(ensure())


def _clock() -> float:
    return time.time() // STEP_S * STEP_S


def _database_bytes(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    return int(row[0]) if row else 0
