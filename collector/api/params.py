"""Query parameters every read route shares: the time range and the bucket width; and the bound on
the points (values) one answer may hold."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Query

from gpuscope.collector import query
from gpuscope.collector.query import buckets as bucket_policy
from gpuscope.collector.query.range_keys import PRESETS_S, parse_range

MAX_RANGE = timedelta(days=800)  # the longest retention of any tier (hour rollups), with margin
# Values in one answer (series x buckets; a series is one GPU's metric, or one port): about 20 MB of
# JSON. The fleet heatmap at its default ~240 buckets fits for 4,096 GPUs.
MAX_POINTS = 1_000_000


# `async def`, though it never waits: FastAPI runs a plain `def` dependency in its thread pool, a
# thread hand-off on every read before the route's own (api/deps.py says the same of the pools').
async def time_range(
    minutes: Annotated[
        int | None,
        Query(ge=1, le=int(MAX_RANGE.total_seconds() // 60), description="How far back from now (default 60)"),
    ] = None,
    range_key: Annotated[
        str | None,
        Query(
            alias="range",
            max_length=100,
            description=f"The range as the dashboard's URLs name it: {', '.join(PRESETS_S)} back from now, or"
            " FROM..TO (e.g. 2026-11-20T08:00..2026-11-21T08:00, UTC unless an offset is written)."
            " With minutes, both must say the same.",
        ),
    ] = None,
    start: Annotated[datetime | None, Query(description="Range start, ISO 8601 with a UTC offset")] = None,
    end: Annotated[datetime | None, Query(description="Range end (default now), ISO 8601 with a UTC offset")] = None,
) -> query.TimeRange:
    if range_key is not None:
        return _named_range(range_key, minutes, given_bounds=start is not None or end is not None)
    if start is None:
        if end is not None:
            raise HTTPException(422, "end needs start")
        return query.last(60 * (minutes or 60))
    if minutes is not None:
        raise HTTPException(422, "give minutes, or start (and end), not both")
    end = end or datetime.now(UTC)
    if start.tzinfo is None or end.tzinfo is None:
        raise HTTPException(422, "start and end need a UTC offset, e.g. 2026-11-20T12:00:00Z")
    if end <= start:
        raise HTTPException(422, "end must be after start")
    if end - start > MAX_RANGE:
        raise HTTPException(422, f"the range may span at most {MAX_RANGE.days} days")
    try:
        return query.TimeRange(start, end)
    except ValueError as exc:  # bounds out of range (query/timerange.py)
        raise HTTPException(422, str(exc)) from None


def _named_range(key: str, minutes: int | None, given_bounds: bool) -> query.TimeRange:
    """range=6h or range=FROM..TO (the dashboard's grammar, collector/query/range_keys.py). minutes may
    come along where it says the same (a script adding range= to an old call); start and end may not."""
    if given_bounds:
        raise HTTPException(422, "give range, or start (and end), not both")
    try:
        window = parse_range(key, MAX_RANGE)
    except ValueError as exc:
        raise HTTPException(422, f"range: {exc}") from None
    if minutes is not None and PRESETS_S.get(key) != minutes * 60:
        raise HTTPException(422, f"range={key} and minutes={minutes} disagree: give one of them")
    return window


TimeRangeDep = Annotated[query.TimeRange, Depends(time_range)]
BucketParam = Annotated[
    int | None,
    Query(
        ge=1,
        le=86400,
        description="Bucket width in seconds (default: about 240 buckets over the range). Under 60: raw samples,"
        " over at most a day. From 60: rounded to whole minutes (the minute rollup); from 3600: to whole hours"
        " (the hour rollup). The answer's bucket_seconds is the width used.",
    ),
]


def bucket_width(time_range: query.TimeRange, requested: int | None) -> int:
    """The width to use, before the samples are looked at (the bucket policy, query/buckets.py). None:
    the automatic one. Else the requested one rounded to the unit of the source that answers it; one
    that cannot be served (too many buckets, or under a minute over too long a range): 422."""
    if requested is None:
        return bucket_policy.chart_width(time_range)
    try:
        return bucket_policy.asked_bucket(time_range, requested)
    except bucket_policy.BadBucket as exc:
        raise HTTPException(422, str(exc)) from None


def fill(conn: Any, time_range: query.TimeRange, bucket: int, requested: int | None) -> int:
    """An automatic width widened where the range's samples would leave buckets empty (a requested one
    stands: the caller asked for it)."""
    return bucket if requested is not None else query.fillable_bucket(conn, time_range, bucket)


def check_points(time_range: query.TimeRange, bucket: int, **series: int) -> None:
    """Refuse (422) an answer of more than MAX_POINTS values before it is read. `series`: the factors
    that multiply the buckets, by name (metrics=16, GPUs=64)."""
    buckets = time_range.bucket_count(bucket)
    points = buckets
    for count in series.values():
        points *= count
    if points > MAX_POINTS:
        factors = " x ".join(f"{count:,} {name}" for name, count in series.items())
        raise HTTPException(
            422,
            f"this asks for {points:,} points ({factors} x {buckets:,} buckets); at most {MAX_POINTS:,} per"
            " request: ask for a wider bucket_seconds, a shorter range, or fewer GPUs or metrics",
        )
