"""The engine's SQL, in one place: alert states (alert_instance), each rule's last evaluation
(alert_rule_status), the groups' bookkeeping (alert_group) and the outbox (alert_notification) as
dispatch writes them and delivery works through them, silences (alert_silence), and the cleanup of old
rows. The decisions are made elsewhere (state.py, decide.py, notify/post.py's classify); this module only
reads and writes. The API and the dashboard read through reads.py.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from gpuscope.alerts.decide import Decision, GroupRow
from gpuscope.alerts.evaluate import RuleResult
from gpuscope.alerts.matchers import Matcher
from gpuscope.alerts.silences import SILENCE_COLUMNS, Silence, check_new, silence_from_row
from gpuscope.alerts.state import Instance

# Alert states

_INSTANCE_COLUMNS = (
    "fingerprint, alertname, rule_group, labels, annotations, value, state, active_at, fired_at,"
    " last_true_at, resolved_at, evaluated_at"
)


async def load_instances(conn: AsyncConnection[Any]) -> dict[str, Instance]:
    """Alerts pending or firing, and resolved ones a group has yet to announce."""
    cur = await conn.execute(
        f"SELECT {_INSTANCE_COLUMNS} FROM alert_instance"  # noqa: S608
        " WHERE state <> 'resolved' OR fingerprint IN (SELECT unnest(firing_sent) FROM alert_group)"
    )
    return {row[0]: Instance(*row) for row in await cur.fetchall()}


async def save_instances(conn: AsyncConnection[Any], changed: list[Instance], dropped: list[str]) -> None:
    if dropped:
        await conn.execute("DELETE FROM alert_instance WHERE fingerprint = ANY(%s)", (dropped,))
    if not changed:
        return
    async with conn.cursor() as cur:
        await cur.executemany(
            f"INSERT INTO alert_instance ({_INSTANCE_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"  # noqa: S608
            " ON CONFLICT (fingerprint) DO UPDATE SET alertname = EXCLUDED.alertname,"
            " rule_group = EXCLUDED.rule_group, labels = EXCLUDED.labels, annotations = EXCLUDED.annotations,"
            " value = EXCLUDED.value, state = EXCLUDED.state, active_at = EXCLUDED.active_at,"
            " fired_at = EXCLUDED.fired_at, last_true_at = EXCLUDED.last_true_at,"
            " resolved_at = EXCLUDED.resolved_at, evaluated_at = EXCLUDED.evaluated_at",
            [
                (
                    i.fingerprint, i.alertname, i.rule_group, Jsonb(i.labels), Jsonb(i.annotations), i.value,
                    i.state, i.active_at, i.fired_at, i.last_true_at, i.resolved_at, i.evaluated_at,
                )
                for i in changed
            ],
        )  # fmt: skip


async def resolve_unknown_rules(conn: AsyncConnection[Any], rules: set[tuple[str, str]], now: dt.datetime) -> int:
    """Alerts of rules no longer configured: pending ones go, firing ones resolve (once, at start)."""
    cur = await conn.execute("SELECT DISTINCT rule_group, alertname FROM alert_instance WHERE state <> 'resolved'")
    gone = [key for key in await cur.fetchall() if (key[0], key[1]) not in rules]
    for group, name in gone:
        await conn.execute(
            "DELETE FROM alert_instance WHERE rule_group = %s AND alertname = %s AND state = 'pending'", (group, name)
        )
        await conn.execute(
            "UPDATE alert_instance SET state = 'resolved', resolved_at = %s, evaluated_at = %s"
            " WHERE rule_group = %s AND alertname = %s AND state = 'firing'",
            (now, now, group, name),
        )
    return len(gone)


async def save_rule_status(
    conn: AsyncConnection[Any], rule_group: str, results: list[RuleResult], now: dt.datetime
) -> None:
    await conn.execute(
        "INSERT INTO alert_rule_status (rule_group, alertname, evaluated_at, seconds, instances, error)"
        " SELECT %s, * FROM unnest(%s::text[], %s::timestamptz[], %s::float8[], %s::int[], %s::text[])"
        " ON CONFLICT (rule_group, alertname) DO UPDATE SET evaluated_at = EXCLUDED.evaluated_at,"
        " seconds = EXCLUDED.seconds, instances = EXCLUDED.instances, error = EXCLUDED.error",
        (
            rule_group,
            [r.rule.alert for r in results],
            [now] * len(results),
            [r.seconds for r in results],
            [len(r.samples) for r in results],
            [r.error for r in results],
        ),
    )


async def cleanup(conn: AsyncConnection[Any], cutoff: dt.datetime) -> None:
    """Forget resolved alerts, finished notifications and silences that ended before `cutoff`."""
    await conn.execute("DELETE FROM alert_instance WHERE state = 'resolved' AND resolved_at < %s", (cutoff,))
    await conn.execute("DELETE FROM alert_notification WHERE status <> 'pending' AND created_at < %s", (cutoff,))
    await conn.execute("DELETE FROM alert_silence WHERE ends_at < %s", (cutoff,))


# Groups and the outbox (dispatch.py calls these inside one transaction)


async def lock_groups(conn: AsyncConnection[Any]) -> list[GroupRow]:
    """Every group's bookkeeping, locked until the transaction ends."""
    cur = await conn.execute(
        "SELECT receiver, group_key, group_labels, created_at, notified_at, firing_sent FROM alert_group FOR UPDATE"
    )
    return [GroupRow(r[0], r[1], r[2], r[3], r[4], tuple(r[5])) for r in await cur.fetchall()]


async def write_decision(conn: AsyncConnection[Any], decision: Decision, now: dt.datetime) -> None:
    """The groups' new bookkeeping and the notifications queued at `now` (status pending)."""
    async with conn.cursor() as cur:
        if decision.deletes:
            await cur.executemany(
                "DELETE FROM alert_group WHERE receiver = %s AND group_key = %s", list(decision.deletes)
            )
        if decision.upserts:
            # A group's labels and creation time never change once it exists.
            await cur.executemany(
                "INSERT INTO alert_group (receiver, group_key, group_labels, created_at, notified_at, firing_sent)"
                " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (receiver, group_key) DO UPDATE"
                " SET notified_at = EXCLUDED.notified_at, firing_sent = EXCLUDED.firing_sent",
                [
                    (r.receiver, r.group_key, Jsonb(r.group_labels), r.created_at, r.notified_at, list(r.firing_sent))
                    for r in decision.upserts
                ],
            )
        if decision.notifications:
            await cur.executemany(
                "INSERT INTO alert_notification (receiver, group_key, status, firing, resolved, message, created_at,"
                " next_attempt_at) VALUES (%s, %s, 'pending', %s, %s, %s, %s, %s)",
                [
                    (n.receiver, n.group_key, n.firing, n.resolved, Jsonb(n.message.to_json()), now, now)
                    for n in decision.notifications
                ],
            )


# Silences


async def active_silences(conn: AsyncConnection[Any]) -> list[Silence]:
    """Silences in force now or later (decide checks each one's start itself)."""
    cur = await conn.execute(f"SELECT {SILENCE_COLUMNS} FROM alert_silence WHERE ends_at > now()")  # noqa: S608
    return [silence_from_row(row) for row in await cur.fetchall()]


async def create_silence(
    conn: AsyncConnection[Any],
    matchers: list[Matcher],
    ends_at: dt.datetime,
    created_by: str,
    comment: str = "",
    starts_at: dt.datetime | None = None,
) -> Silence:
    """A new silence; ValueError when it has no matchers or ends before it starts or in the past."""
    starts_at = check_new(matchers, ends_at, starts_at, dt.datetime.now(dt.UTC))
    cur = await conn.execute(
        f"INSERT INTO alert_silence (matchers, starts_at, ends_at, created_by, comment)"  # noqa: S608
        f" VALUES (%s, %s, %s, %s, %s) RETURNING {SILENCE_COLUMNS}",
        (Jsonb([m.as_dict() for m in matchers]), starts_at, ends_at, created_by, comment),
    )
    row = await cur.fetchone()
    assert row is not None
    return silence_from_row(row)


async def expire_silence(conn: AsyncConnection[Any], silence_id: int) -> Silence | None:
    """End a silence now; None when there is no such silence. Expiring an expired one changes nothing."""
    cur = await conn.execute(
        f"UPDATE alert_silence SET starts_at = least(starts_at, now() - interval '1 millisecond'),"  # noqa: S608
        f" ends_at = least(ends_at, now()) WHERE silence_id = %s RETURNING {SILENCE_COLUMNS}",
        (silence_id,),
    )
    row = await cur.fetchone()
    return silence_from_row(row) if row else None


# The outbox, as delivery works through it


@dataclass(frozen=True)
class Pending:
    """A notification waiting to be sent."""

    notification_id: int
    receiver: str
    group_key: str
    message: dict[str, Any]
    attempts: int  # made so far
    created_at: dt.datetime


async def due_notifications(conn: AsyncConnection[Any]) -> list[Pending]:
    """The oldest pending notification of each receiver, where it is due (one at a time keeps the order)."""
    cur = await conn.execute(
        "SELECT notification_id, receiver, group_key, message, attempts, created_at FROM ("
        "SELECT DISTINCT ON (receiver) notification_id, receiver, group_key, message, attempts,"
        " next_attempt_at <= now() AS due, created_at FROM alert_notification WHERE status = 'pending'"
        " ORDER BY receiver, notification_id) oldest WHERE due"
    )
    return [Pending(*row) for row in await cur.fetchall()]


async def mark_sent(conn: AsyncConnection[Any], notification_id: int, attempts: int, http_status: int | None) -> None:
    await conn.execute(
        "UPDATE alert_notification SET status = 'sent', attempts = %s, http_status = %s, sent_at = now(),"
        " last_error = NULL WHERE notification_id = %s",
        (attempts, http_status, notification_id),
    )


async def mark_failed(
    conn: AsyncConnection[Any], notification_id: int, attempts: int, http_status: int | None, reason: str
) -> None:
    await conn.execute(
        "UPDATE alert_notification SET status = 'failed', attempts = %s, http_status = %s, last_error = %s"
        " WHERE notification_id = %s",
        (attempts, http_status, reason, notification_id),
    )


async def retry_later(
    conn: AsyncConnection[Any], notification_id: int, attempts: int, http_status: int | None, error: str, wait_s: float
) -> None:
    await conn.execute(
        "UPDATE alert_notification SET attempts = %s, http_status = %s, last_error = %s,"
        " next_attempt_at = now() + make_interval(secs => %s) WHERE notification_id = %s",
        (attempts, http_status, error, wait_s, notification_id),
    )
