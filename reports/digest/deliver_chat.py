"""The chat part of a digest cycle: each chat entry gets one summary per account it covers, once. The
payloads are built by the chat service's module in alerts/notify (its `digest`), and posted and judged by
the poster the alerts use (alerts/notify/post.py), from this worker thread through BlockingPoster."""

from __future__ import annotations

import logging
from datetime import date, datetime
from typing import Any

from psycopg import Connection

from gpuscope.alerts.notify import DIGEST_KINDS
from gpuscope.alerts.notify.post import BlockingPoster, Outcome
from gpuscope.alerts.redact import redact_url
from gpuscope.collector.query.usage import UsageReport
from gpuscope.reports.digest import records
from gpuscope.reports.digest.result import DigestResult, next_state
from gpuscope.reports.digest.settings import DigestSettings
from gpuscope.reports.digest.summary import account_summaries
from gpuscope.reports.text import one_line

log = logging.getLogger(__name__)


def send_chat(
    conn: Connection[Any], week: date, settings: DigestSettings, by_account: UsageReport, by_job: UsageReport,
    now: datetime, result: DigestResult,
) -> None:  # fmt: skip
    states = records.chat_states(conn, week)
    with BlockingPoster() as poster:
        for target in settings.chat:
            summaries = account_summaries(by_account, by_job, week, settings.top_users, settings.accounts_for(target))
            unreachable: Outcome | None = None  # after a network error, the entry's other messages wait
            for summary in summaries:
                account = summary.account or ""
                before = states.get((target.name, account))
                if before is not None and before.state in records.FINAL:
                    continue
                attempts = (before.attempts if before else 0) + 1
                if unreachable is None:
                    # Claimed before it goes: should this process die before the answer, it is not sent twice.
                    records.record_chat(conn, week, target.name, account, "sending", attempts, "", now)
                    outcome = poster.post(target.kind, target.url, DIGEST_KINDS[target.kind](summary))
                    unreachable = outcome if outcome.http_status is None and outcome.result == "retry" else None
                else:
                    outcome = unreachable
                state = next_state(outcome.result, attempts, settings.max_attempts)
                records.record_chat(conn, week, target.name, account, state, attempts, outcome.detail, now)
                result.chat[state] += 1
                if state != "sent":
                    log.warning("digest to chat %s (%s %s), account %r: %s (%s, attempt %d of %d)", target.name,
                                target.kind, redact_url(target.url), one_line(summary.account), outcome.detail,
                                state, attempts, settings.max_attempts)  # fmt: skip
