"""One cycle of a week's digest: the chat summaries per account (deliver_chat.py), then the waste emails
(deliver_email.py), each message once (records.py). The scheduler (loop.py) calls this at the configured
time, and again for the messages that failed; `send_digest` is also how to send a week by hand.

A message that fails is logged (without its URL or password) and tried again next cycle, up to
`max_attempts`; one message's failure never stops the others. One process runs a digest cycle at a time
(an advisory lock), so a digest sent by hand and the scheduler cannot both send a message."""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from psycopg import Connection

from gpuscope.collector.query.timerange import TimeRange
from gpuscope.collector.query.usage import Rates, usage_report
from gpuscope.reports.digest import records
from gpuscope.reports.digest.deliver_chat import send_chat
from gpuscope.reports.digest.deliver_email import send_emails
from gpuscope.reports.digest.result import DigestResult
from gpuscope.reports.digest.settings import DigestSettings

log = logging.getLogger(__name__)

SEND_LOCK_KEY = 0x67706469676E6F77  # "gpdignow": one digest cycle at a time, by hand or scheduled


def week_range(week_start: date) -> TimeRange:
    start = datetime.combine(week_start, time(), UTC)
    return TimeRange(start, start + timedelta(days=7))


def send_digest(
    conn: Connection[Any], week_start: date, settings: DigestSettings, now: datetime, rates: Rates | None = None
) -> DigestResult:
    """Sends what is left of the digest of the 7 days from `week_start` (UTC), recording each message;
    `now` is when (the rate limits count back from it). A week whose digest finished is not sent again."""
    result = DigestResult(week_start)
    locked = conn.execute("SELECT pg_try_advisory_lock(%s)", (SEND_LOCK_KEY,)).fetchone()
    conn.commit()
    if not locked or not locked[0]:
        result.busy = True
        return result
    try:
        _cycle(conn, week_start, settings, now, rates or Rates(), result)
    finally:
        conn.rollback()  # whatever failed mid-way: the unlock must not meet an aborted transaction
        conn.execute("SELECT pg_advisory_unlock(%s)", (SEND_LOCK_KEY,))
        conn.commit()
    return result


def _cycle(
    conn: Connection[Any], week: date, settings: DigestSettings, now: datetime, rates: Rates, result: DigestResult
) -> None:
    run = records.get_run(conn, week)
    if run is not None and run.finished_at is not None:
        result.done_before = True
        return
    records.start_cycle(conn, week, now)
    span = week_range(week)
    by_job = usage_report(conn, span, "job", rates)
    if settings.chat:
        send_chat(conn, week, settings, usage_report(conn, span, "account", rates), by_job, now, result)
    if settings.email is not None:
        send_emails(conn, week, settings, settings.email, by_job, rates, now, result)
    if result.pending == 0:
        records.finish_run(conn, week, now)
        result.finished = True
    log.info(
        "digest of the week of %s: chat %s, emails %s; %s", week, dict(result.chat) or "none",
        dict(result.email) or "none", "done" if result.finished else f"{result.pending} left for the next cycle",
    )  # fmt: skip
