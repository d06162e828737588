"""Delivers the outbox: one notification at a time per receiver, oldest first, so a receiver sees
firing before resolved. Each is posted, and the answer judged, by notify/post.py:

- sent (2xx): marked sent.
- retry after 429: again as long as Retry-After says (the header, in seconds or as a date, or Discord's
  `retry_after` in the body).
- retry after 5xx, a timeout or a network error: exponential backoff with jitter, for up to a day.
- failed (any other 4xx): failed at once, kept with the reason (retrying a rejected payload cannot help).
A notification is marked sent right after its 2xx, so only a crash between the two repeats one.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import random
import time
from typing import Any

import httpx
from psycopg import AsyncConnection

from gpuscope.alerts import store
from gpuscope.alerts.config import NotifyConfig, Receiver
from gpuscope.alerts.notify import KINDS
from gpuscope.alerts.notify.message import Message
from gpuscope.alerts.notify.post import Outcome, post
from gpuscope.alerts.redact import redact_url

log = logging.getLogger(__name__)

BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 300.0
GIVE_UP_AFTER = dt.timedelta(days=1)


def backoff_s(attempts: int, rng: random.Random) -> float:
    """Exponential, with 'equal jitter': half the delay fixed, half random."""
    delay = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** max(attempts - 1, 0))
    return delay / 2 + rng.uniform(0, delay / 2)


class Delivery:
    def __init__(self, config: NotifyConfig, client: httpx.AsyncClient, rng: random.Random | None = None) -> None:
        self._config = config
        self._client = client
        self._rng = rng or random.Random()
        self._next_allowed: dict[str, float] = {}  # receiver -> monotonic time (rate limit)

    async def run_once(self, conn: AsyncConnection[Any]) -> int:
        """Send every notification due now (the oldest pending one per receiver); returns how many were tried."""
        rows = await store.due_notifications(conn)
        now = time.monotonic()
        due = [r for r in rows if self._next_allowed.get(r.receiver, 0.0) <= now]
        outcomes = await asyncio.gather(*(self._send(row) for row in due))
        for row, outcome in zip(due, outcomes, strict=True):
            await self._record(conn, row, outcome)
        return len(due)

    async def _send(self, row: store.Pending) -> Outcome:
        receiver: Receiver | None = self._config.receivers.get(row.receiver)
        if receiver is None:
            return Outcome("failed", None, f"receiver {row.receiver!r} is no longer configured")
        self._next_allowed[receiver.name] = time.monotonic() + receiver.min_interval_s
        message = Message.from_json(receiver.name, row.group_key, row.message, self._config.external_url)
        return await post(self._client, receiver.kind, receiver.url, KINDS[receiver.kind](message))

    async def _record(self, conn: AsyncConnection[Any], row: store.Pending, outcome: Outcome) -> None:
        notification_id, attempts = row.notification_id, row.attempts + 1
        where = self._where(row.receiver)
        if outcome.result == "sent":
            await store.mark_sent(conn, notification_id, attempts, outcome.http_status)
            log.info("notification %d sent to %s", notification_id, where)
            return
        too_old = dt.datetime.now(dt.UTC) - row.created_at > GIVE_UP_AFTER
        if outcome.result == "failed" or too_old:
            reason = outcome.detail if not too_old else f"gave up after {attempts} attempts: {outcome.detail}"
            await store.mark_failed(conn, notification_id, attempts, outcome.http_status, reason)
            log.warning("notification %d to %s failed: %s", notification_id, where, reason)
            return
        wait = outcome.wait_s if outcome.wait_s is not None else backoff_s(attempts, self._rng)
        await store.retry_later(conn, notification_id, attempts, outcome.http_status, outcome.detail, wait)
        log.info("notification %d to %s: %s; next try in %.1f s", notification_id, where, outcome.detail, wait)

    def _where(self, name: str) -> str:
        receiver = self._config.receivers.get(name)
        return f"{name} ({receiver.kind} {redact_url(receiver.url)})" if receiver else name
