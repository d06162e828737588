"""Time ranges and the bucket width that gives a chart a sensible number of points."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

NICE_BUCKETS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Bounds outside these are no telemetry's, and near datetime's limits (years 1 and 9999) an offset or a
# bucket edge overflows. Comparing aware datetimes is exact whatever their offsets (no conversion).
EARLIEST = EPOCH
LATEST = datetime(2200, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class TimeRange:
    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise ValueError("time range bounds must be timezone-aware")
        if self.end <= self.start:
            raise ValueError("time range must end after it starts")
        if self.start < EARLIEST or self.end > LATEST:
            raise ValueError(
                f"time range bounds must lie between {EARLIEST:%Y-%m-%dT%H:%M:%SZ} and {LATEST:%Y-%m-%dT%H:%M:%SZ}"
            )

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    def buckets(self, bucket_s: int) -> list[datetime]:
        """Bucket starts (aligned to the epoch, as date_bin aligns them) covering the range."""
        # One addition per bucket, not a timedelta built from a numpy integer: a day of minutes is read
        # on every node page, and building them cost more than its query (ask for the first or the count
        # alone with first_bucket() and bucket_count()).
        start, step = self.first_bucket(bucket_s), timedelta(seconds=bucket_s)
        return [start + step * i for i in range(self.bucket_count(bucket_s))]

    def first_bucket(self, bucket_s: int) -> datetime:
        """buckets()[0]: the start of the bucket holding the range's start."""
        return EPOCH + timedelta(seconds=int(self.start.timestamp()) // bucket_s * bucket_s)

    def bucket_count(self, bucket_s: int) -> int:
        """len(buckets()), counted as numpy.arange counts its steps."""
        first = int(self.start.timestamp()) // bucket_s * bucket_s
        return max(0, math.ceil((self.end.timestamp() - first) / bucket_s))


def last(seconds: float, now: datetime | None = None) -> TimeRange:
    end = now or datetime.now(UTC)
    return TimeRange(end - timedelta(seconds=seconds), end)


def source_bucket(bucket_s: int) -> int:
    """A bucket width rounded to the unit of the source that answers it (collector/query/cells.py):
    under a minute, raw samples, any whole number of seconds; from a minute, the minute rollup, whole
    minutes; from an hour, the hour rollup, whole hours (to the nearest, halves up). Unrounded, a width
    off the minute (or the hour) would be read from raw samples (or minutes) over the whole range."""
    for unit in (3600, 60):
        if bucket_s >= unit:
            return (bucket_s + unit // 2) // unit * unit
    return bucket_s


def bucket_for(time_range: TimeRange, max_points: int = 240, min_bucket_s: int = 1) -> int:
    """The smallest nice bucket that keeps the chart at or under `max_points` columns."""
    for bucket in NICE_BUCKETS_S:
        if bucket >= min_bucket_s and time_range.seconds / bucket <= max_points:
            return bucket
    return NICE_BUCKETS_S[-1]
