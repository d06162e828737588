"""The email part of a digest cycle: each user over the thresholds, not opted out, with an address and
under the rate limit, gets one email for the week, at most `max_emails_per_run` a cycle."""

from __future__ import annotations

import logging
from datetime import date, datetime
from typing import Any

from psycopg import Connection

from gpuscope.collector.query.usage import Rates, UsageReport, UsageRow
from gpuscope.reports.digest import records
from gpuscope.reports.digest.mailer import Mailer, MailOutcome, ServerUnavailable
from gpuscope.reports.digest.result import DigestResult, next_state
from gpuscope.reports.digest.settings import DigestSettings, EmailSettings
from gpuscope.reports.digest.waste import user_waste, wasteful_users
from gpuscope.reports.digest.waste_email import waste_email
from gpuscope.reports.text import one_line

log = logging.getLogger(__name__)


def send_emails(
    conn: Connection[Any], week: date, settings: DigestSettings, mail: EmailSettings, by_job: UsageReport,
    rates: Rates, now: datetime, result: DigestResult,
) -> None:  # fmt: skip
    states = records.email_states(conn, week)
    opted_out = settings.opt_out | records.opted_out(conn)
    tried = 0
    unavailable: MailOutcome | None = None  # the server could not be reached: the others wait
    with Mailer(mail) as mailer:
        for user, rows in wasteful_users(by_job, mail):
            before = states.get(user)
            if before is not None and before.state in records.FINAL:
                continue
            address = mail.address(user)
            why_not = _why_not(conn, user, address, opted_out, mail, now)
            if why_not:
                result.email[f"skipped: {why_not}"] += 1
                continue
            assert address is not None
            if tried >= mail.max_emails_per_run:
                result.email["later"] += 1  # over this cycle's cap: the next cycle sends it
                continue
            tried += 1
            attempts = (before.attempts if before else 0) + 1
            if unavailable is None:
                try:
                    outcome = _compose_and_send(conn, mailer, week, user, rows, address, attempts, mail, rates, now)
                except ServerUnavailable as exc:
                    outcome = unavailable = exc.outcome
            else:
                outcome = unavailable
            state = next_state(outcome.result, attempts, settings.max_attempts)
            records.record_email(conn, week, user, address, state, attempts, outcome.detail, now)
            result.email[state] += 1
            if state != "sent":
                log.warning("digest email to user %r: %s (%s, attempt %d of %d)", one_line(user), outcome.detail,
                            state, attempts, settings.max_attempts)  # fmt: skip


def _compose_and_send(
    conn: Connection[Any], mailer: Mailer, week: date, user: str, rows: list[UsageRow], address: str, attempts: int,
    mail: EmailSettings, rates: Rates, now: datetime,
) -> MailOutcome:  # fmt: skip
    try:
        message = waste_email(user_waste(conn, user, rows, rates, now), address, week, mail, now)
    except Exception as exc:  # a bug or a failed query: this email waits, the others go
        log.exception("digest email to user %r: cannot compose it", one_line(user))
        conn.rollback()
        return MailOutcome("retry", f"cannot compose it: {type(exc).__name__}")
    # Claimed before it goes: should this process die before the answer, the email is not sent twice.
    records.record_email(conn, week, user, address, "sending", attempts, "", now)
    return mailer.send(message, address)  # ServerUnavailable: the caller records it, for the others too


def _why_not(
    conn: Connection[Any], user: str, address: str | None, opted_out: set[str] | frozenset[str], mail: EmailSettings,
    now: datetime,
) -> str | None:  # fmt: skip
    """Why `user` gets no email this week, if so."""
    if user in opted_out:
        return "opted out"
    if address is None:
        return "no address"
    if records.emails_sent_in_week_before(conn, user, now) >= mail.max_emails_per_user_per_week:
        return "rate limit"
    return None
