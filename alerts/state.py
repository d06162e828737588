"""Alert states as Prometheus keeps them: inactive -> pending (for) -> firing -> resolved, with
keep_firing_for; stored in alert_instance so that a restarted engine continues where it stopped."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from gpuscope.alerts.evaluate import RuleResult


@dataclass(frozen=True)
class Instance:
    fingerprint: str
    alertname: str
    rule_group: str
    labels: dict[str, str]
    annotations: dict[str, str]
    value: float | None
    state: str  # pending | firing | resolved
    active_at: dt.datetime
    fired_at: dt.datetime | None
    last_true_at: dt.datetime
    resolved_at: dt.datetime | None
    evaluated_at: dt.datetime


_COLUMNS = (
    "fingerprint, alertname, rule_group, labels, annotations, value, state, active_at, fired_at,"
    " last_true_at, resolved_at, evaluated_at"
)


async def load(conn: AsyncConnection[Any], rule_group: str, alertname: str) -> dict[str, Instance]:
    cur = await conn.execute(
        f"SELECT {_COLUMNS} FROM alert_instance WHERE rule_group = %s AND alertname = %s",  # noqa: S608
        (rule_group, alertname),
    )
    return {row[0]: Instance(*row) for row in await cur.fetchall()}


# A firing alert whose state did not change is written back at most this often (its value and
# last_true_at): thousands of firing alerts must not mean thousands of writes every cycle. The engine
# keeps the current instances in memory; after a restart keep_firing_for counts from at most this
# much earlier.
REFRESH_S = 60.0


def transition(
    rule_group: str, result: RuleResult, known: dict[str, Instance], now: dt.datetime
) -> tuple[list[Instance], list[str]]:
    """The instances changed by this evaluation, and the fingerprints of pending ones that are gone
    (inactive again: forgotten, as Prometheus does). A failed rule changes nothing."""
    if result.error is not None:
        return [], []
    rule = result.rule
    changed, dropped = [], []
    current = {s.fingerprint: s for s in result.samples}
    for fp, sample in current.items():
        old = known.get(fp)
        if old is None or old.state == "resolved":
            firing = rule.for_s <= 0
            changed.append(
                Instance(
                    fp, rule.alert, rule_group, sample.labels, sample.annotations, sample.value,
                    "firing" if firing else "pending", now, now if firing else None, now, None, now,
                )
            )  # fmt: skip
            continue
        state, fired_at = old.state, old.fired_at
        if state == "pending" and (now - old.active_at).total_seconds() >= rule.for_s:
            state, fired_at = "firing", now
        changed.append(
            replace(
                old, labels=sample.labels, annotations=sample.annotations, value=sample.value, state=state,
                fired_at=fired_at, last_true_at=now, evaluated_at=now,
            )
        )  # fmt: skip
    for fp, old in known.items():
        if fp in current or old.state == "resolved":
            continue
        if old.state == "pending":
            dropped.append(fp)
        elif (now - old.last_true_at).total_seconds() < rule.keep_firing_for_s:
            changed.append(replace(old, evaluated_at=now))
        else:
            changed.append(replace(old, state="resolved", resolved_at=now, evaluated_at=now))
    return changed, dropped


def worth_writing(new: Instance, stored: Instance | None) -> bool:
    if stored is None or new.state != stored.state or new.labels != stored.labels:
        return True
    return (new.evaluated_at - stored.evaluated_at).total_seconds() >= REFRESH_S


async def save(conn: AsyncConnection[Any], changed: list[Instance], dropped: list[str]) -> None:
    if dropped:
        await conn.execute("DELETE FROM alert_instance WHERE fingerprint = ANY(%s)", (dropped,))
    if not changed:
        return
    async with conn.cursor() as cur:
        await cur.executemany(
            f"INSERT INTO alert_instance ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"  # noqa: S608
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
