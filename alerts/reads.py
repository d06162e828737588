"""Alerting as the API and the dashboard show it: alerts by state (with the silences muting them),
each rule's last evaluation, the notification outbox, silences."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, fields
from typing import Any, Literal

from psycopg import Connection

from gpuscope.alerts.silences import SILENCE_COLUMNS, Silence, silence_from_row
from gpuscope.alerts.state import AlertFields

AlertState = Literal["active", "firing", "pending", "resolved", "all"]
STATES: dict[str, tuple[str, ...]] = {
    "active": ("pending", "firing"),
    "firing": ("firing",),
    "pending": ("pending",),
    "resolved": ("resolved",),
    "all": ("pending", "firing", "resolved"),
}
SEVERITY_ORDER = ("critical", "error", "warning", "info")


@dataclass(frozen=True)
class AlertRow(AlertFields):
    """An alert as the API and the dashboard show it: with the active silences that mute it."""

    resolved_at: dt.datetime | None
    evaluated_at: dt.datetime
    silenced_by: list[int]

    @property
    def severity(self) -> str:
        return self.labels.get("severity", "")


@dataclass(frozen=True)
class RuleStatus:
    rule_group: str
    alertname: str
    evaluated_at: dt.datetime
    seconds: float
    instances: int
    error: str | None


@dataclass(frozen=True)
class NotificationRow:
    id: int
    receiver: str
    group_key: str
    status: str
    firing: int
    resolved: int
    created_at: dt.datetime
    attempts: int
    http_status: int | None
    last_error: str | None
    sent_at: dt.datetime | None
    next_attempt_at: dt.datetime
    alertnames: list[str]


def alerts(conn: Connection[Any], state: AlertState = "active", limit: int = 1000) -> list[AlertRow]:
    """Alerts, most severe and newest first, each with the active silences that mute it."""
    rows = conn.execute(
        "SELECT fingerprint, alertname, rule_group, labels, annotations, value, state, active_at, fired_at,"
        " resolved_at, evaluated_at FROM alert_instance WHERE state = ANY(%s)"
        " ORDER BY coalesce(resolved_at, fired_at, active_at) DESC LIMIT %s",
        (list(STATES[state]), limit),
    ).fetchall()
    now = dt.datetime.now(dt.UTC)
    active = [s for s in silences(conn) if s.active(now)]
    names = [f.name for f in fields(AlertRow) if f.name != "silenced_by"]
    out = [
        AlertRow(**dict(zip(names, row, strict=True)), silenced_by=[s.silence_id for s in active if s.mutes(row[3])])
        for row in rows
    ]
    rank = {s: i for i, s in enumerate(SEVERITY_ORDER)}
    return sorted(out, key=lambda a: (a.state != "firing", rank.get(a.severity, len(rank))))


def rule_status(conn: Connection[Any]) -> list[RuleStatus]:
    rows = conn.execute(
        "SELECT rule_group, alertname, evaluated_at, seconds, instances, error FROM alert_rule_status"
        " ORDER BY rule_group, alertname"
    ).fetchall()
    return [RuleStatus(*row) for row in rows]


def notifications(conn: Connection[Any], status: str | None = None, limit: int = 200) -> list[NotificationRow]:
    rows = conn.execute(
        "SELECT notification_id, receiver, group_key, status, firing, resolved, created_at, attempts, http_status,"
        " last_error, sent_at, next_attempt_at,"
        " ARRAY(SELECT DISTINCT a -> 'labels' ->> 'alertname' FROM jsonb_array_elements(message -> 'alerts') a"
        "       ORDER BY 1)"
        " FROM alert_notification WHERE %s::text IS NULL OR status = %s ORDER BY notification_id DESC LIMIT %s",
        (status, status, limit),
    ).fetchall()
    return [NotificationRow(*row) for row in rows]


def silences(conn: Connection[Any], include_expired: bool = False, limit: int = 500) -> list[Silence]:
    where = "" if include_expired else "WHERE ends_at > now()"
    rows = conn.execute(
        f"SELECT {SILENCE_COLUMNS} FROM alert_silence {where} ORDER BY ends_at DESC LIMIT %s",  # noqa: S608
        (limit,),
    ).fetchall()
    return [silence_from_row(row) for row in rows]
