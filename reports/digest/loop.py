"""The digest's schedule, as a leader task: one collector at a time checks every minute whether a week's
digest is due, and runs its cycle (run.py) in a worker thread (the usage queries, SMTP and the chat posts
are synchronous).

A week's digest is due at its `weekday` and `hour_utc` and covers the 7 days before that day. It starts
once the week's last hour of usage has settled (usage is computed a little after each hour), or at the
latest SETTLE_WAIT after its time; it is not started more than MAX_LATE after its time, so a collector
started on a Thursday does not send Monday's digest. Failed messages are retried every RETRY_AFTER until
each is sent or given up (max_attempts); the database says which weeks are done, across restarts."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import psycopg
from psycopg import AsyncConnection, Connection

from gpuscope.collector.parts import LeaderTask
from gpuscope.collector.query.usage import Rates
from gpuscope.collector.store.usage import SETTLED
from gpuscope.reports.digest import records
from gpuscope.reports.digest.result import DigestResult
from gpuscope.reports.digest.run import send_digest, week_range
from gpuscope.reports.digest.settings import DigestSettings

log = logging.getLogger(__name__)

LOCK_KEY = 0x6770646967657374  # "gpdigest": the one digest scheduler across collector replicas
CHECK_EVERY_S = 60.0
RETRY_AFTER = timedelta(minutes=10)
MAX_LATE = timedelta(days=1)
SETTLE_WAIT = timedelta(hours=6)


def scheduled_week(now: datetime, settings: DigestSettings) -> tuple[date, datetime]:
    """The latest digest time at or before `now`, and the first day of the week it covers."""
    today = now.astimezone(UTC).date()
    day = today - timedelta(days=(today.weekday() - settings.weekday) % 7)
    due = datetime.combine(day, time(settings.hour_utc), UTC)
    if due > now:
        due -= timedelta(days=7)
    return due.date() - timedelta(days=7), due


def run_if_due(conn: Connection[Any], settings: DigestSettings, rates: Rates, now: datetime) -> DigestResult | None:
    """The due week's cycle, if it is due now (see above); None when nothing is."""
    week, due = scheduled_week(now, settings)
    run = records.get_run(conn, week)
    conn.commit()
    if run is None:
        if now - due > MAX_LATE:
            return None
        if now - due < SETTLE_WAIT and not usage_settled(conn, week_range(week).end):
            return None
    elif run.finished_at is not None or now - run.last_cycle_at < RETRY_AFTER:
        return None
    return send_digest(conn, week, settings, now, rates)


def usage_settled(conn: Connection[Any], week_end: datetime) -> bool:
    """Whether the week's last hour of usage was computed after it settled (or no job ran before its end)."""
    row = conn.execute(
        "SELECT (SELECT computed_at >= bucket + interval '1 hour' + %s OR final FROM usage_hour WHERE bucket = %s),"
        " EXISTS (SELECT 1 FROM job_allocation WHERE started_at < %s)",
        (SETTLED, week_end - timedelta(hours=1), week_end),
    ).fetchone()
    conn.commit()
    return row is not None and (bool(row[0]) or not row[1])


def digest_task(settings: DigestSettings, rates: Rates) -> LeaderTask:
    async def lead(lock_conn: AsyncConnection[Any], dsn: str) -> None:
        log.info("digest scheduler leading: %s at %02d:00 UTC", _weekday(settings), settings.hour_utc)
        with await asyncio.to_thread(_connect, dsn) as conn:
            while True:
                await lock_conn.execute("SELECT 1")  # a lost lock connection ends the lead (the lock went with it)
                await asyncio.to_thread(run_if_due, conn, settings, rates, datetime.now(UTC))
                await asyncio.sleep(CHECK_EVERY_S)

    return LeaderTask("digest scheduler", LOCK_KEY, lead, retry_s=CHECK_EVERY_S / 3)


def _connect(dsn: str) -> Connection[Any]:
    return psycopg.connect(dsn, autocommit=True, application_name="gpuscope digest")


def _weekday(settings: DigestSettings) -> str:
    return ("mondays", "tuesdays", "wednesdays", "thursdays", "fridays", "saturdays", "sundays")[settings.weekday]
