"""The time ranges a user names in one word, the same in the UI's URLs (`?range=6h`) and the read API's
(`range=6h`): a preset, the last 15 minutes to 7 days, or a span of the stored history,
"2026-11-20T08:00..2026-11-21T08:00" (UTC unless an offset is written), so a view of an incident can be
shared. One grammar for both, kept here: the dashboard sits above the query layer and reads it from here."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuscope.collector.query.timerange import TimeRange, last
from gpuscope.core.range_presets import PRESETS_S

SEPARATOR = ".."
FORMAT = "%Y-%m-%dT%H:%M"
EXAMPLE = "2026-11-20 08:00"


def parse_range(key: str, max_span: timedelta, now: datetime | None = None) -> TimeRange:
    """A preset ("6h") or a span ("2026-11-20T08:00..2026-11-21T08:00") of at most `max_span`;
    ValueError in words."""
    if key in PRESETS_S:
        return last(PRESETS_S[key], now)
    start_text, separator, end_text = key.partition(SEPARATOR)
    if not separator:
        raise ValueError(f"unknown range {key!r}: one of {', '.join(PRESETS_S)}, or FROM..TO in UTC")
    start, end = moment(start_text), moment(end_text)
    if end <= start:
        raise ValueError(f"the range must end after it starts: {start:%Y-%m-%d %H:%M} is not before {end:%H:%M}")
    if end - start > max_span:
        raise ValueError(f"a range can span at most {max_span.days} days")
    return TimeRange(start, end)


def custom(start: datetime, end: datetime) -> str:
    """The key of the span from `start` to `end`, in UTC to the minute."""
    return f"{start.astimezone(UTC):{FORMAT}}{SEPARATOR}{end.astimezone(UTC):{FORMAT}}"


def moment(text: str) -> datetime:
    """ "2026-11-20 08:00" or "2026-11-20T08:00" (seconds and an offset optional; none means UTC) as UTC."""
    try:
        found = datetime.fromisoformat(text.strip())
        return found.replace(tzinfo=UTC) if found.tzinfo is None else found.astimezone(UTC)
    except ValueError:
        raise ValueError(f"not a date and time: {text!r} (expected like {EXAMPLE})") from None
    except OverflowError:  # an offset that takes year 1 or 9999 out of datetime's range
        raise ValueError(f"not a date and time of telemetry: {text!r}") from None


def checked_key(key: str, max_span: timedelta) -> str:
    """`key` itself once it parses (a command line's --range, checked before any request); ValueError in words."""
    parse_range(key, max_span)
    return key
