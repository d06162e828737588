"""Silences: label matchers that mute matching alerts until an expiry. Stored in alert_silence
(created, expired and read by store.py)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from gpuscope.alerts.matchers import Matcher, all_match


@dataclass(frozen=True)
class Silence:
    silence_id: int
    matchers: tuple[Matcher, ...]
    starts_at: dt.datetime
    ends_at: dt.datetime
    created_by: str
    comment: str
    created_at: dt.datetime

    def active(self, now: dt.datetime) -> bool:
        return self.starts_at <= now < self.ends_at

    def mutes(self, labels: dict[str, str]) -> bool:
        return all_match(self.matchers, labels)

    def to_json(self, now: dt.datetime) -> dict[str, Any]:
        state = "active" if self.active(now) else ("pending" if now < self.starts_at else "expired")
        return {
            "id": self.silence_id, "matchers": [m.as_dict() for m in self.matchers], "state": state,
            "starts_at": self.starts_at.isoformat(), "ends_at": self.ends_at.isoformat(),
            "created_by": self.created_by, "comment": self.comment, "created_at": self.created_at.isoformat(),
        }  # fmt: skip


MAX_SILENCE = dt.timedelta(days=366)  # as long as duration_s may say: ends_at must not say longer
SILENCE_COLUMNS = "silence_id, matchers, starts_at, ends_at, created_by, comment, created_at"


def silence_from_row(row: tuple[Any, ...] | Any) -> Silence:
    matchers = tuple(Matcher(m["name"], m["op"], m["value"]) for m in row[1])
    return Silence(row[0], matchers, *row[2:])


def check_new(
    matchers: list[Matcher], ends_at: dt.datetime, starts_at: dt.datetime | None, now: dt.datetime
) -> dt.datetime:
    """A new silence's start (now unless given); ValueError when it would mute everything or nothing."""
    if not matchers:
        raise ValueError("a silence needs at least one matcher (it would mute every alert)")
    starts_at = starts_at or now
    if ends_at <= max(starts_at, now):
        raise ValueError("the silence would end before it starts or in the past")
    if ends_at - now > MAX_SILENCE:
        raise ValueError(f"a silence lasts at most {MAX_SILENCE.days} days (ends_at is further away)")
    return starts_at
