"""Daily partitions of the sample tables on plain PostgreSQL: created ahead, and on demand for late
data, and dropped whole when older than the retention period."""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime, timedelta
from typing import Any

from psycopg import AsyncConnection, sql

log = logging.getLogger(__name__)

TABLES = ("gpu_sample", "ib_port_sample", "mig_sample")
DAYS_AHEAD = 2
# Taken in the transaction that creates partitions, so concurrent collectors do it one at a time.
PARTITION_LOCK_KEY = 0x67707370617274  # "gpspart"


def name(table: str, day: date) -> str:
    return f"{table}_p{day:%Y%m%d}"


def day_of(seconds: float) -> date:
    return datetime.fromtimestamp(seconds, UTC).date()


async def ensure(conn: AsyncConnection[Any], days: set[date], tables: tuple[str, ...] = TABLES) -> None:
    """Create the partitions for `days` that do not exist yet, in the caller's transaction."""
    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (PARTITION_LOCK_KEY,))
    for table in tables:
        for day in sorted(days):
            start = datetime(day.year, day.month, day.day, tzinfo=UTC)
            await conn.execute(
                sql.SQL("CREATE TABLE IF NOT EXISTS {} PARTITION OF {} FOR VALUES FROM ({}) TO ({})").format(
                    sql.Identifier(name(table, day)),
                    sql.Identifier(table),
                    sql.Literal(start),
                    sql.Literal(start + timedelta(days=1)),
                )
            )


async def existing_days(conn: AsyncConnection[Any], table: str) -> set[date]:
    cur = await conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = %s",
        (table,),
    )
    prefix = f"{table}_p"
    return {
        datetime.strptime(relname[len(prefix) :], "%Y%m%d").replace(tzinfo=UTC).date()
        for (relname,) in await cur.fetchall()
        if relname.startswith(prefix) and relname[len(prefix) :].isdigit()
    }


async def maintain(conn: AsyncConnection[Any], retention: timedelta, now: datetime | None = None) -> list[str]:
    """Create today's and the next days' partitions; drop those wholly older than `retention`."""
    today = (now or datetime.now(UTC)).date()
    await ensure(conn, {today + timedelta(days=n) for n in range(DAYS_AHEAD + 1)})
    oldest_kept = ((now or datetime.now(UTC)) - retention).date()
    dropped = []
    for table in TABLES:
        for day in sorted(await existing_days(conn, table)):
            if day < oldest_kept:
                await conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(name(table, day))))
                dropped.append(name(table, day))
    if dropped:
        log.info("retention: dropped %s", ", ".join(dropped))
    return dropped
