"""What the API and the dashboard show about alerting: alerts by state, rule health, notifications."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from psycopg import AsyncConnection

from alerts.silences import list_silences

AlertState = Literal["active", "firing", "pending", "resolved", "all"]
_STATES = {
    "active": ("pending", "firing"),
    "firing": ("firing",),
    "pending": ("pending",),
    "resolved": ("resolved",),
    "all": ("pending", "firing", "resolved"),
}


async def list_alerts(
    conn: AsyncConnection[Any], state: AlertState = "active", limit: int = 1000
) -> list[dict[str, Any]]:
    """Alerts, newest first, each marked `silenced` when an active silence matches it."""
    cur = await conn.execute(
        "SELECT fingerprint, alertname, rule_group, labels, annotations, value, state, active_at, fired_at,"
        " resolved_at, evaluated_at FROM alert_instance WHERE state = ANY(%s)"
        " ORDER BY coalesce(resolved_at, fired_at, active_at) DESC LIMIT %s",
        (list(_STATES[state]), limit),
    )
    now = dt.datetime.now(dt.UTC)
    silences = [s for s in await list_silences(conn) if s.active(now)]
    out = []
    for row in await cur.fetchall():
        labels = row[3]
        out.append(
            {
                "fingerprint": row[0], "alertname": row[1], "rule_group": row[2], "labels": labels,
                "annotations": row[4], "value": row[5], "state": row[6], "active_at": row[7], "fired_at": row[8],
                "resolved_at": row[9], "evaluated_at": row[10],
                "silenced_by": [s.silence_id for s in silences if s.mutes(labels)],
            }
        )  # fmt: skip
    return out


async def rule_status(conn: AsyncConnection[Any]) -> list[dict[str, Any]]:
    cur = await conn.execute(
        "SELECT rule_group, alertname, evaluated_at, seconds, instances, error FROM alert_rule_status"
        " ORDER BY rule_group, alertname"
    )
    names = ("rule_group", "alertname", "evaluated_at", "seconds", "instances", "error")
    return [dict(zip(names, row, strict=True)) for row in await cur.fetchall()]


async def notifications(
    conn: AsyncConnection[Any], status: str | None = None, limit: int = 200
) -> list[dict[str, Any]]:
    cur = await conn.execute(
        "SELECT notification_id, receiver, group_key, status, firing, resolved, created_at, attempts, http_status,"
        " last_error, sent_at, next_attempt_at, message FROM alert_notification"
        " WHERE %s::text IS NULL OR status = %s ORDER BY notification_id DESC LIMIT %s",
        (status, status, limit),
    )
    out = []
    for row in await cur.fetchall():
        alerts = row[12].get("alerts", [])
        out.append(
            {
                "id": row[0], "receiver": row[1], "group_key": row[2], "status": row[3], "firing": row[4],
                "resolved": row[5], "created_at": row[6], "attempts": row[7], "http_status": row[8],
                "last_error": row[9], "sent_at": row[10], "next_attempt_at": row[11],
                "alertnames": sorted({a["labels"].get("alertname", "") for a in alerts}),
            }
        )  # fmt: skip
    return out
