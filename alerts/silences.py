"""Silences: label matchers that mute matching alerts until an expiry. Stored in alert_silence."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

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


SILENCE_COLUMNS = "silence_id, matchers, starts_at, ends_at, created_by, comment, created_at"


def silence_from_row(row: tuple[Any, ...] | Any) -> Silence:
    matchers = tuple(Matcher(m["name"], m["op"], m["value"]) for m in row[1])
    return Silence(row[0], matchers, *row[2:])


async def create(
    conn: AsyncConnection[Any],
    matchers: list[Matcher],
    ends_at: dt.datetime,
    created_by: str,
    comment: str = "",
    starts_at: dt.datetime | None = None,
) -> Silence:
    if not matchers:
        raise ValueError("a silence needs at least one matcher (it would mute every alert)")
    now = dt.datetime.now(dt.UTC)
    starts_at = starts_at or now
    if ends_at <= max(starts_at, now):
        raise ValueError("the silence would end before it starts or in the past")
    cur = await conn.execute(
        f"INSERT INTO alert_silence (matchers, starts_at, ends_at, created_by, comment)"  # noqa: S608
        f" VALUES (%s, %s, %s, %s, %s) RETURNING {SILENCE_COLUMNS}",
        (Jsonb([m.as_dict() for m in matchers]), starts_at, ends_at, created_by, comment),
    )
    row = await cur.fetchone()
    assert row is not None
    return silence_from_row(row)


async def expire(conn: AsyncConnection[Any], silence_id: int) -> Silence | None:
    """End a silence now; None when there is no such silence. Expiring an expired one changes nothing."""
    cur = await conn.execute(
        f"UPDATE alert_silence SET starts_at = least(starts_at, now() - interval '1 millisecond'),"  # noqa: S608
        f" ends_at = least(ends_at, now()) WHERE silence_id = %s RETURNING {SILENCE_COLUMNS}",
        (silence_id,),
    )
    row = await cur.fetchone()
    return silence_from_row(row) if row else None


async def active_silences(conn: AsyncConnection[Any]) -> list[Silence]:
    """Silences in force now or later (dispatch checks each one's start itself)."""
    cur = await conn.execute(f"SELECT {SILENCE_COLUMNS} FROM alert_silence WHERE ends_at > now()")  # noqa: S608
    return [silence_from_row(row) for row in await cur.fetchall()]
