"""Which notifications are due, as Alertmanager decides them: a pure function, no I/O.

Silenced and inhibited alerts are left out; each remaining alert is routed to one or more receivers
and grouped by the route's group_by labels. A new group waits group_wait; after a notification, a
group is notified again when its alerts change (no sooner than group_interval) or, unchanged and
still firing, after repeat_interval. Resolved alerts are announced when the receiver wants them.

decide() takes the in-memory alerts, the notification config, the groups' bookkeeping (alert_group
rows), the silences and the time, and returns the notifications to queue and the rows to write or
delete; dispatch.py reads and writes those through store.py in one transaction.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field, replace

from gpuscope.alerts.config import InhibitRule, NotifyConfig, Route
from gpuscope.alerts.matchers import all_match
from gpuscope.alerts.notify.message import Alert, Message
from gpuscope.alerts.silences import Silence
from gpuscope.alerts.state import Instance
from gpuscope.core.timefmt import rfc3339

ALERTMANAGER_REPEAT_S = 60.0  # Alertmanager forgets an alert not re-sent before its endsAt

GroupId = tuple[str, str]  # (receiver, group key)


@dataclass(frozen=True)
class GroupRow:
    """A group's bookkeeping (a row of alert_group)."""

    receiver: str
    group_key: str
    group_labels: dict[str, str]
    created_at: dt.datetime
    notified_at: dt.datetime | None = None  # None: never notified (waiting group_wait)
    firing_sent: tuple[str, ...] = ()  # fingerprints firing in the last notification, sorted

    @property
    def key(self) -> GroupId:
        return (self.receiver, self.group_key)


@dataclass(frozen=True)
class Notification:
    """One row for the outbox (alert_notification)."""

    receiver: str
    group_key: str
    firing: int
    resolved: int
    message: Message


@dataclass
class Decision:
    notifications: list[Notification] = field(default_factory=list)  # in group order: the outbox order
    upserts: list[GroupRow] = field(default_factory=list)  # new groups, and groups whose row changed
    deletes: list[GroupId] = field(default_factory=list)  # groups that are done or no longer configured


@dataclass
class _Group:
    route: Route
    labels: dict[str, str]
    firing: dict[str, Instance] = field(default_factory=dict)


def decide(
    instances: dict[str, Instance],
    config: NotifyConfig,
    rows: list[GroupRow],
    silences: list[Silence],
    now: dt.datetime,
) -> Decision:
    """What to queue and write at `now`, given every group's row as stored."""
    firing = [i for i in instances.values() if i.state == "firing"]
    mute = muted(firing, silences, config.inhibit_rules, now)
    groups: dict[GroupId, _Group] = {}
    for inst in firing:
        if inst.fingerprint in mute:
            continue
        for matched in config.route.match(inst.labels):
            labels = group_labels(matched, inst.labels)
            key = (matched.receiver, group_key(matched, labels))
            groups.setdefault(key, _Group(matched, labels)).firing[inst.fingerprint] = inst
    paths = routes_by_path(config.route)
    stored = {row.key: row for row in rows}
    out = Decision()
    for key in sorted(set(groups) | set(stored)):
        receiver = config.receivers.get(key[0])
        route: Route | None = groups[key].route if key in groups else paths.get(key[1].split(":", 1)[0])
        if receiver is None or route is None:  # the configuration changed: forget the group
            if key in stored:
                out.deletes.append(key)
            continue
        group = groups.get(key) or _Group(route, stored[key].group_labels)
        repeat_cap = ALERTMANAGER_REPEAT_S if receiver.kind == "alertmanager" else None
        before = stored.get(key)
        after, note = _decide_group(key, group, before, instances, config, receiver.send_resolved, repeat_cap, now)
        if note is not None:
            out.notifications.append(note)
        if after is None:
            if before is not None:
                out.deletes.append(key)
        elif after != before:
            out.upserts.append(after)
    return out


def _decide_group(
    key: GroupId,
    group: _Group,
    row: GroupRow | None,
    instances: dict[str, Instance],
    config: NotifyConfig,
    send_resolved: bool,
    repeat_cap_s: float | None,
    now: dt.datetime,
) -> tuple[GroupRow | None, Notification | None]:
    """The group's row afterwards (None: the group is done) and the notification due, if any."""
    route, firing = group.route, sorted(group.firing)
    if row is None:
        if not firing:
            return None, None
        row = GroupRow(key[0], key[1], group.labels, now)
    sent = set(row.firing_sent)
    resolved = [fp for fp in sorted(sent - set(firing)) if fp in instances and instances[fp].state == "resolved"]
    if row.notified_at is None:
        if not firing:
            return None, None
        if (now - row.created_at).total_seconds() < route.group_wait_s:
            return row, None
        return _notify(row, group, firing, [], instances, config, now)
    since = (now - row.notified_at).total_seconds()
    new = set(firing) - sent
    repeat_s = min(route.repeat_interval_s, repeat_cap_s) if repeat_cap_s else route.repeat_interval_s
    if since >= route.group_interval_s and (new or sent - set(firing)):
        if new or (resolved and send_resolved):
            shown = resolved if send_resolved else []
            return _notify(row, group, firing, shown, instances, config, now)
        if not firing:
            return None, None
        # only silenced or resolved-but-unannounced alerts left the group: nothing to say
        return replace(row, firing_sent=tuple(firing)), None
    if firing and since >= repeat_s:
        return _notify(row, group, firing, [], instances, config, now)
    return row, None


def _notify(
    row: GroupRow,
    group: _Group,
    firing: list[str],
    resolved: list[str],
    instances: dict[str, Instance],
    config: NotifyConfig,
    now: dt.datetime,
) -> tuple[GroupRow | None, Notification]:
    alerts = tuple(to_alert(instances[fp], config.external_url) for fp in firing + resolved)
    message = Message(row.receiver, row.group_key, group.labels, alerts, config.external_url)
    note = Notification(row.receiver, row.group_key, len(firing), len(resolved), message)
    if not firing:
        return None, note  # everything resolved and announced: the group is done
    return replace(row, notified_at=now, firing_sent=tuple(firing)), note


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
