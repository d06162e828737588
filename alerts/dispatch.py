"""From firing alerts to queued notifications, as Alertmanager decides them.

Silenced and inhibited alerts are left out; each remaining alert is routed to one or more receivers
and grouped by the route's group_by labels. A new group waits group_wait; after a notification, a
group is notified again when its alerts change (no sooner than group_interval) or, unchanged and
still firing, after repeat_interval. Resolved alerts are announced when the receiver wants them.
The group's bookkeeping and the outbox row are written in one transaction: a restart neither loses
nor repeats a notification.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from gpuscope.alerts.config import InhibitRule, NotifyConfig, Route
from gpuscope.alerts.matchers import all_match
from gpuscope.alerts.notify.message import Alert, Message
from gpuscope.alerts.silences import Silence, active_silences
from gpuscope.alerts.state import Instance
from gpuscope.core.timefmt import rfc3339

ALERTMANAGER_REPEAT_S = 60.0  # Alertmanager forgets an alert not re-sent before its endsAt


@dataclass
class _Group:
    route: Route
    labels: dict[str, str]
    firing: dict[str, Instance] = field(default_factory=dict)


def muted(
    firing: list[Instance], silences: list[Silence], inhibit: tuple[InhibitRule, ...], now: dt.datetime
) -> set[str]:
    """Fingerprints of firing alerts that a silence or an inhibition rule mutes."""
    out = set()
    active = [s for s in silences if s.active(now)]
    for inst in firing:
        if any(s.mutes(inst.labels) for s in active):
            out.add(inst.fingerprint)
    for rule in inhibit:
        sources = [i for i in firing if all_match(rule.source, i.labels)]
        for inst in firing:
            if all_match(rule.target, inst.labels) and any(
                s.fingerprint != inst.fingerprint  # an alert never inhibits itself
                and all(s.labels.get(n, "") == inst.labels.get(n, "") for n in rule.equal)
                for s in sources
            ):
                out.add(inst.fingerprint)
    return out


def group_labels(route: Route, labels: dict[str, str]) -> dict[str, str]:
    if "..." in route.group_by:
        return dict(labels)
    return {name: labels[name] for name in route.group_by if name in labels}


def group_key(route: Route, labels: dict[str, str]) -> str:
    return f"{route.path}:{json.dumps(sorted(labels.items()), separators=(',', ':'))}"


def routes_by_path(route: Route) -> dict[str, Route]:
    out = {route.path: route}
    for child in route.routes:
        out.update(routes_by_path(child))
    return out


async def dispatch(
    conn: AsyncConnection[Any], instances: dict[str, Instance], config: NotifyConfig, now: dt.datetime
) -> int:
    """Queue the notifications due now; returns how many."""
    firing = [i for i in instances.values() if i.state == "firing"]
    silences = await active_silences(conn)
    mute = muted(firing, silences, config.inhibit_rules, now)
    groups: dict[tuple[str, str], _Group] = {}
    for inst in firing:
        if inst.fingerprint in mute:
            continue
        for matched in config.route.match(inst.labels):
            labels = group_labels(matched, inst.labels)
            key = (matched.receiver, group_key(matched, labels))
            groups.setdefault(key, _Group(matched, labels)).firing[inst.fingerprint] = inst
    paths = routes_by_path(config.route)
    queued = 0
    async with conn.transaction():
        cur = await conn.execute(
            "SELECT receiver, group_key, group_labels, created_at, notified_at, firing_sent FROM alert_group FOR UPDATE"
        )
        stored = {(r[0], r[1]): r for r in await cur.fetchall()}
        for key in sorted(set(groups) | set(stored)):
            receiver = config.receivers.get(key[0])
            route: Route | None = groups[key].route if key in groups else paths.get(key[1].split(":", 1)[0])
            if receiver is None or route is None:  # the configuration changed: forget the group
                await conn.execute("DELETE FROM alert_group WHERE receiver = %s AND group_key = %s", key)
                continue
            group = groups.get(key) or _Group(route, stored[key][2])
            repeat_cap = ALERTMANAGER_REPEAT_S if receiver.kind == "alertmanager" else None
            queued += await _decide(
                conn, key, group, stored.get(key), instances, config, receiver.send_resolved, repeat_cap, now
            )
    return queued


async def _decide(
    conn: AsyncConnection[Any],
    key: tuple[str, str],
    group: _Group,
    row: tuple[Any, ...] | None,
    instances: dict[str, Instance],
    config: NotifyConfig,
    send_resolved: bool,
    repeat_cap_s: float | None,
    now: dt.datetime,
) -> int:
    route, firing = group.route, sorted(group.firing)
    if row is None:
        if not firing:
            return 0
        await conn.execute(
            "INSERT INTO alert_group (receiver, group_key, group_labels, created_at) VALUES (%s, %s, %s, %s)",
            (*key, Jsonb(group.labels), now),
        )
        row = (*key, group.labels, now, None, [])
    created_at, notified_at, sent = row[3], row[4], set(row[5])
    resolved = [fp for fp in sorted(sent - set(firing)) if fp in instances and instances[fp].state == "resolved"]
    if notified_at is None:
        if not firing:
            await _forget(conn, key)
            return 0
        if (now - created_at).total_seconds() < route.group_wait_s:
            return 0
        return await _notify(conn, key, group, firing, [], instances, config, now)
    since = (now - notified_at).total_seconds()
    new = set(firing) - sent
    repeat_s = min(route.repeat_interval_s, repeat_cap_s) if repeat_cap_s else route.repeat_interval_s
    if since >= route.group_interval_s and (new or sent - set(firing)):
        if new or (resolved and send_resolved):
            shown = resolved if send_resolved else []
            return await _notify(conn, key, group, firing, shown, instances, config, now)
        if not firing:
            await _forget(conn, key)
        else:  # only silenced or resolved-but-unannounced alerts left the group: nothing to say
            await conn.execute(
                "UPDATE alert_group SET firing_sent = %s WHERE receiver = %s AND group_key = %s", (firing, *key)
            )
        return 0
    if firing and since >= repeat_s:
        return await _notify(conn, key, group, firing, [], instances, config, now)
    return 0


async def _notify(
    conn: AsyncConnection[Any],
    key: tuple[str, str],
    group: _Group,
    firing: list[str],
    resolved: list[str],
    instances: dict[str, Instance],
    config: NotifyConfig,
    now: dt.datetime,
) -> int:
    alerts = tuple(to_alert(instances[fp], config.external_url) for fp in firing + resolved)
    message = Message(key[0], key[1], group.labels, alerts, config.external_url)
    await conn.execute(
        "INSERT INTO alert_notification (receiver, group_key, status, firing, resolved, message, created_at,"
        " next_attempt_at) VALUES (%s, %s, 'pending', %s, %s, %s, %s, %s)",
        (*key, len(firing), len(resolved), Jsonb(message.to_json()), now, now),
    )
    if firing:
        await conn.execute(
            "UPDATE alert_group SET notified_at = %s, firing_sent = %s WHERE receiver = %s AND group_key = %s",
            (now, firing, *key),
        )
    else:
        await _forget(conn, key)  # everything resolved and announced: the group is done
    return 1


async def _forget(conn: AsyncConnection[Any], key: tuple[str, str]) -> None:
    await conn.execute("DELETE FROM alert_group WHERE receiver = %s AND group_key = %s", key)


def to_alert(inst: Instance, external_url: str) -> Alert:
    started = inst.fired_at or inst.active_at
    return Alert(
        status="resolved" if inst.state == "resolved" else "firing",
        labels=inst.labels,
        annotations=inst.annotations,
        starts_at=rfc3339(started),
        ends_at=rfc3339(inst.resolved_at) if inst.resolved_at and inst.state == "resolved" else None,
        fingerprint=inst.fingerprint,
        generator_url=f"{external_url}/alerts?fingerprint={inst.fingerprint}",
        value=inst.value,
    )
