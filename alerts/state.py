"""Alert states as Prometheus keeps them: inactive -> pending (for) -> firing -> resolved, with
keep_firing_for; stored in alert_instance (store.py) so that a restarted engine continues where it
stopped. This module decides the transitions; it reads and writes nothing.

One departure from Prometheus: its `for` clock starts when the rule engine first sees the condition (a
restart restores it from the ALERTS_FOR_STATE series, within --rules.alert.for-outage-tolerance), so a new
server, or one down for longer, waits the whole `for` however long the stored series show the condition
held. A rule whose query says since when its condition holds (the `since` column) has its clock start
there instead: an idle job's GPUs idle for an hour before the collector started fire at its first
evaluation, not 30 minutes later."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only its shape: evaluate.py runs SQL, this module runs none
    from gpuscope.alerts.evaluate import RuleResult, Sample


@dataclass(frozen=True)
class AlertFields:
    """What an alert is, wherever it is held: the engine's Instance (below) and the API's and the
    dashboard's AlertRow (reads.py) both start with these, in this order (the columns of alert_instance)."""

    fingerprint: str
    alertname: str
    rule_group: str
    labels: dict[str, str]
    annotations: dict[str, str]
    value: float | None
    state: str  # pending | firing | resolved
    active_at: dt.datetime
    fired_at: dt.datetime | None


@dataclass(frozen=True)
class Instance(AlertFields):
    """An alert as the engine keeps it between evaluations (store.py writes it to alert_instance)."""

    last_true_at: dt.datetime
    resolved_at: dt.datetime | None
    evaluated_at: dt.datetime


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
            active_at = began(sample, now)
            firing = (now - active_at).total_seconds() >= rule.for_s
            changed.append(
                Instance(
                    fp, rule.alert, rule_group, sample.labels, sample.annotations, sample.value,
                    "firing" if firing else "pending", active_at, now if firing else None, now, None, now,
                )
            )  # fmt: skip
            continue
        state, fired_at, active_at = old.state, old.fired_at, old.active_at
        if state == "pending":
            # The data's word on when the condition began beats the engine's first sight of it (it may
            # have been restarted, or be new); without one, the clock runs from that first sight.
            active_at = began(sample, now) if sample.since is not None else old.active_at
            if (now - active_at).total_seconds() >= rule.for_s:
                state, fired_at = "firing", now
        changed.append(
            replace(
                old, labels=sample.labels, annotations=sample.annotations, value=sample.value, state=state,
                active_at=active_at, fired_at=fired_at, last_true_at=now, evaluated_at=now,
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


def began(sample: Sample, now: dt.datetime) -> dt.datetime:
    """When the sample's condition began: as the data says, never later than now (an exporter's clock may
    run ahead), else now."""
    return now if sample.since is None else min(sample.since, now)


def worth_writing(new: Instance, stored: Instance | None) -> bool:
    if stored is None or new.state != stored.state or new.labels != stored.labels:
        return True
    if new.active_at != stored.active_at:  # the data moved a pending alert's clock
        return True
    return (new.evaluated_at - stored.evaluated_at).total_seconds() >= REFRESH_S
