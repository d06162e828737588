"""Which source counts each part of a usage report's window, so that the report answers the window asked, to
the minute: the whole hours inside it are read from usage_1h (what the collectors' maintenance computed), the
parts of an hour at its edges are computed afresh from the minute rollups, as that maintenance computes an
hour (collector/store/usage.py). Where an edge's minute rollups are gone (older than their retention,
--minute-rollup-days), only usage_1h's whole hour is left: the report counts that whole hour and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg import Connection

from gpuscope.collector.query.timerange import TimeRange

HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)


@dataclass(frozen=True)
class Span:
    start: datetime
    end: datetime


@dataclass(frozen=True)
class WindowPlan:
    start: datetime  # what the report counts: the window asked to the minute, widened only by hours_only
    end: datetime
    hours: Span | None  # whole hours read from usage_1h (None: none)
    pieces: tuple[Span, ...]  # parts of an hour computed from the minute rollups
    hours_only: tuple[Span, ...]  # edges counted as usage_1h's whole hour: their minute rollups are gone


def floor_hour(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def ceil_hour(at: datetime) -> datetime:
    floor = floor_hour(at)
    return floor if floor == at else floor + HOUR


def to_the_minute(time_range: TimeRange) -> Span:
    """The window in UTC, its ends at the start of their minute (the minute rollups' unit); a window inside
    one minute is that minute."""
    start = time_range.start.astimezone(UTC).replace(second=0, microsecond=0)
    end = time_range.end.astimezone(UTC).replace(second=0, microsecond=0)
    return Span(start, max(end, start + MINUTE))


def hour_parts(window: Span) -> list[Span]:
    """The window cut at each hour: every part but the first and the last is a whole hour."""
    parts, at = [], window.start
    while at < window.end:
        until = min(floor_hour(at) + HOUR, window.end)
        parts.append(Span(at, until))
        at = until
    return parts


# An edge has its minutes when its hour has a minute rollup at or before the edge's first minute: retention
# drops the oldest minutes first (the common case, one short read of the time index).
_MINUTES_KEPT = "SELECT EXISTS (SELECT FROM gpu_rollup_1m WHERE bucket >= %(hour)s AND bucket <= %(at)s)"
# Else the GPUs may simply not have reported then (a new fleet, an outage): the minutes were dropped only if
# the hour's rollup, which retention keeps longer and never recomputes, counts more samples than its minutes
# still hold. And usage_1h must have the hour, to be read instead.
_MINUTES_DROPPED = (
    "SELECT coalesce((SELECT sum(samples) FROM gpu_rollup_1h WHERE bucket = %(hour)s) > (SELECT coalesce(sum(samples),"
    "   0) FROM gpu_rollup_1m WHERE bucket >= %(hour)s AND bucket < %(hour)s + interval '1 hour'), false)"
    " AND EXISTS (SELECT FROM usage_hour WHERE bucket = %(hour)s)"
)


def minutes_dropped(conn: Connection[Any], edge: Span) -> bool:
    """Whether retention dropped the minute rollups this part of an hour needs, and usage_1h has its hour."""
    params = {"hour": floor_hour(edge.start), "at": edge.start}
    kept = conn.execute(_MINUTES_KEPT, params).fetchone()
    if kept is None or kept[0]:
        return False
    dropped = conn.execute(_MINUTES_DROPPED, params).fetchone()
    return bool(dropped and dropped[0])


def plan_window(conn: Connection[Any], time_range: TimeRange) -> WindowPlan:
    """Where each part of the window is read from (see the module's docstring)."""
    window = to_the_minute(time_range)
    parts = hour_parts(window)
    edges = {i for i, part in enumerate(parts) if part.end - part.start < HOUR}
    from_hours, pieces, hours_only = [], [], []
    for i, part in enumerate(parts):
        hour = floor_hour(part.start)
        if i in edges and not minutes_dropped(conn, part):
            pieces.append(part)
            continue
        from_hours.append(hour)
        if i in edges:
            hours_only.append(Span(hour, hour + HOUR))
    # The whole hours are consecutive: the interior, and either edge widened to its hour next to it.
    hours = Span(min(from_hours), max(from_hours) + HOUR) if from_hours else None
    start = min([window.start, *(s.start for s in hours_only)])
    end = max([window.end, *(s.end for s in hours_only)])
    return WindowPlan(start, end, hours, tuple(pieces), tuple(hours_only))
