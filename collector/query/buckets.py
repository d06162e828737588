"""The one bucket policy of every chart and read: how wide a range's buckets are (chosen for a number of
points, or asked for), and which source answers them (raw samples, the minute rollup, the hour rollup),
including when the minute rollup's rows are read as they are and widened in memory. The read API and
the dashboard both ask here, so the same window gets the same buckets from the same source."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from gpuscope.collector.query.spacing import fillable_buckets
from gpuscope.collector.query.timerange import TimeRange, bucket_for, source_bucket

Source = Literal["raw", "minute", "hour"]

CHART_POINTS = 240  # an automatic width gives about this many buckets
MAX_BUCKETS = 5000  # a width asked for may give at most this many
MAX_RAW_RANGE = timedelta(days=1)  # a bucket under a minute reads raw samples: over at most this much time
# From a window this long, a chart that prefers the rollups (the dashboard's) gets whole minutes.
ROLLUP_FROM = timedelta(hours=1)
# Up to this many minute cells (GPUs x minutes of the window), buckets of several minutes are read as
# the minute rollup's rows as they are and widened in memory: regrouping the rollup in SQL cost more
# than twice as much.
MINUTE_CELLS_MAX = 400_000


class BadBucket(ValueError):
    """A width asked for that cannot be served; the message says why, for the caller to show."""


def source_of(bucket_s: int) -> Source:
    """The tier a width reads (cells.py): the hour rollup for whole hours, the minute rollup for whole
    minutes, raw samples otherwise (each also reads the finer tiers where the coarser one is unsettled)."""
    if bucket_s >= 3600 and bucket_s % 3600 == 0:
        return "hour"
    if bucket_s >= 60 and bucket_s % 60 == 0:
        return "minute"
    return "raw"


def may_widen(bucket_s: int) -> bool:
    """Whether buckets this wide may be read as minutes and widened (read_width): several whole
    minutes, under an hour (from an hour, whole hours read the hour rollup)."""
    return source_of(bucket_s) == "minute" and bucket_s > 60


def read_width(bucket_s: int, window: TimeRange, series: int) -> int:
    """The width to read for buckets of `bucket_s` over `window` for `series` rows (GPUs): 60 where
    they may be read as minutes and widened (may_widen), up to MINUTE_CELLS_MAX minute cells; else
    `bucket_s`."""
    if may_widen(bucket_s) and series * window.seconds / 60 <= MINUTE_CELLS_MAX:
        return 60
    return bucket_s


def asked_bucket(window: TimeRange, requested: int) -> int:
    """A width asked for, rounded to the unit of the source that answers it (source_bucket), so that no
    width reads raw rows over a long range; BadBucket where it gives more than MAX_BUCKETS buckets, or
    is under a minute over more than MAX_RAW_RANGE."""
    bucket = source_bucket(requested)
    if window.seconds / bucket > MAX_BUCKETS:
        raise BadBucket(f"bucket_seconds={requested} gives more than {MAX_BUCKETS} buckets over this range")
    if bucket < 60 and window.seconds > MAX_RAW_RANGE.total_seconds():
        raise BadBucket(
            f"bucket_seconds={requested}: a bucket under 60 s reads raw samples, over at most"
            f" {MAX_RAW_RANGE.total_seconds() / 3600:g} hours; ask for a shorter range or a bucket of 60 s or more"
        )
    return bucket


def chart_width(window: TimeRange, max_points: int = CHART_POINTS, prefer_rollups: bool = False) -> int:
    """The automatic width before the samples are looked at: the narrowest nice one giving at most
    `max_points` buckets; with `prefer_rollups`, whole minutes from ROLLUP_FROM up, so that the rollups
    answer rather than raw samples."""
    minimum = 60 if prefer_rollups and window.seconds >= ROLLUP_FROM.total_seconds() else 1
    return bucket_for(window, max_points, minimum)


def chart_buckets(conn: Any, window: TimeRange, *max_points: int, prefer_rollups: bool = False) -> tuple[int, ...]:
    """A width per chart of the window (chart_width), never narrower than the samples fill: an empty
    bucket between two samples would read as an outage (spacing.py). The range's spacing is measured
    once for all of them."""
    return fillable_buckets(conn, window, *(chart_width(window, n, prefer_rollups) for n in max_points))


def chart_bucket(conn: Any, window: TimeRange, max_points: int = CHART_POINTS, prefer_rollups: bool = False) -> int:
    return chart_buckets(conn, window, max_points, prefer_rollups=prefer_rollups)[0]
