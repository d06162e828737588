"""Time ranges and the bucket width that gives a chart a sensible number of points."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np

NICE_BUCKETS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class TimeRange:
    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise ValueError("time range bounds must be timezone-aware")
        if self.end <= self.start:
            raise ValueError("time range must end after it starts")

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    def buckets(self, bucket_s: int) -> list[datetime]:
        """Bucket starts (aligned to the epoch, as date_bin aligns them) covering the range."""
        first = int(self.start.timestamp()) // bucket_s * bucket_s
        stops = np.arange(first, self.end.timestamp(), bucket_s)
        return [EPOCH + timedelta(seconds=int(s)) for s in stops]


def last(seconds: float, now: datetime | None = None) -> TimeRange:
    end = now or datetime.now(UTC)
    return TimeRange(end - timedelta(seconds=seconds), end)


def bucket_for(time_range: TimeRange, max_points: int = 240, min_bucket_s: int = 1) -> int:
    """The smallest nice bucket that keeps the chart at or under `max_points` columns."""
    for bucket in NICE_BUCKETS_S:
        if bucket >= min_bucket_s and time_range.seconds / bucket <= max_points:
            return bucket
    return NICE_BUCKETS_S[-1]
