"""What the digests record (migration 0017): each week's run, each message's state, the opt-outs. Each
write is committed at once, so that what was sent stays recorded whatever happens next."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from psycopg import Connection

FINAL = ("sending", "sent", "failed")  # a message in one of these is never sent (again) for its week


@dataclass(frozen=True)
class Run:
    started_at: datetime
    last_cycle_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class Attempted:
    state: str
    attempts: int


def get_run(conn: Connection[Any], week: date) -> Run | None:
    row = conn.execute(
        "SELECT started_at, last_cycle_at, finished_at FROM report_digest_run WHERE week = %s", (week,)
    ).fetchone()
    return Run(*row) if row else None


def start_cycle(conn: Connection[Any], week: date, now: datetime) -> Run:
    """The week's run, created by its first cycle; each cycle moves last_cycle_at (retries wait after it)."""
    row = conn.execute(
        "INSERT INTO report_digest_run (week, started_at, last_cycle_at) VALUES (%(week)s, %(now)s, %(now)s)"
        " ON CONFLICT (week) DO UPDATE SET last_cycle_at = CASE WHEN report_digest_run.finished_at IS NULL"
        "   THEN EXCLUDED.last_cycle_at ELSE report_digest_run.last_cycle_at END"
        " RETURNING started_at, last_cycle_at, finished_at",
        {"week": week, "now": now},
    ).fetchone()
    conn.commit()
    assert row is not None
    return Run(*row)


def finish_run(conn: Connection[Any], week: date, now: datetime) -> None:
    conn.execute("UPDATE report_digest_run SET finished_at = %s WHERE week = %s", (now, week))
    conn.commit()


def chat_states(conn: Connection[Any], week: date) -> dict[tuple[str, str], Attempted]:
    rows = conn.execute("SELECT target, account, state, attempts FROM report_chat_log WHERE week = %s", (week,))
    return {(target, account): Attempted(state, attempts) for target, account, state, attempts in rows}


def record_chat(
    conn: Connection[Any], week: date, target: str, account: str, state: str, attempts: int, detail: str, now: datetime
) -> None:
    conn.execute(
        "INSERT INTO report_chat_log (week, target, account, state, attempts, tried_at, detail)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (week, target, account) DO UPDATE SET"
        " state = EXCLUDED.state, attempts = EXCLUDED.attempts, tried_at = EXCLUDED.tried_at, detail = EXCLUDED.detail",
        (week, target, account, state, attempts, now, detail),
    )
    conn.commit()


def email_states(conn: Connection[Any], week: date) -> dict[str, Attempted]:
    rows = conn.execute("SELECT username, state, attempts FROM report_email_log WHERE week = %s", (week,))
    return {user: Attempted(state, attempts) for user, state, attempts in rows}


def record_email(
    conn: Connection[Any], week: date, user: str, address: str, state: str, attempts: int, detail: str, now: datetime
) -> None:
    conn.execute(
        "INSERT INTO report_email_log (week, username, address, state, attempts, tried_at, sent_at, detail)"
        " VALUES (%(week)s, %(user)s, %(address)s, %(state)s, %(attempts)s, %(now)s,"
        "   CASE WHEN %(state)s = 'sent' THEN %(now)s::timestamptz END, %(detail)s)"
        " ON CONFLICT (week, username) DO UPDATE SET address = EXCLUDED.address, state = EXCLUDED.state,"
        " attempts = EXCLUDED.attempts, tried_at = EXCLUDED.tried_at, sent_at = EXCLUDED.sent_at,"
        " detail = EXCLUDED.detail",
        {"week": week, "user": user, "address": address, "state": state, "attempts": attempts, "now": now,
         "detail": detail},
    )  # fmt: skip
    conn.commit()


def emails_sent_in_week_before(conn: Connection[Any], user: str, now: datetime) -> int:
    """Emails sent to `user` (or being sent) in the 7 days before `now`: what the rate limit counts."""
    row = conn.execute(
        "SELECT count(*) FROM report_email_log WHERE username = %s AND state IN ('sent', 'sending')"
        " AND tried_at > %s AND tried_at <= %s",
        (user, now - timedelta(days=7), now),
    ).fetchone()
    return int(row[0]) if row else 0


def opted_out(conn: Connection[Any]) -> set[str]:
    return {row[0] for row in conn.execute("SELECT username FROM report_opt_out")}
