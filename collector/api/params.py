"""Query parameters every read route shares: the time range and the bucket width."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import Depends, HTTPException, Query

from gpuscope.collector import query

MAX_RANGE = timedelta(days=800)  # the longest retention of any tier (hour rollups), with margin
MAX_BUCKETS = 5000


def time_range(
    minutes: Annotated[
        int | None,
        Query(ge=1, le=int(MAX_RANGE.total_seconds() // 60), description="How far back from now (default 60)"),
    ] = None,
    start: Annotated[datetime | None, Query(description="Range start, ISO 8601 with a UTC offset")] = None,
    end: Annotated[datetime | None, Query(description="Range end (default now), ISO 8601 with a UTC offset")] = None,
) -> query.TimeRange:
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
    return query.TimeRange(start, end)


TimeRangeDep = Annotated[query.TimeRange, Depends(time_range)]
BucketParam = Annotated[
    int | None, Query(ge=1, le=86400, description="Bucket width in seconds (default: about 240 buckets over the range)")
]


def bucket_width(time_range: query.TimeRange, requested: int | None) -> int:
    """The requested width if the answer stays a sensible size, else the automatic one. The width
    also picks the source: raw below a minute, the minute rollup, the hour rollup from an hour."""
    if requested is None:
        return query.bucket_for(time_range)
    if time_range.seconds / requested > MAX_BUCKETS:
        raise HTTPException(422, f"bucket_seconds={requested} gives more than {MAX_BUCKETS} buckets over this range")
    return requested
