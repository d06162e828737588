"""How far apart a range's samples lie, so that no chart is cut into buckets narrower than its data can
fill: a bucket between two samples is empty, and a heatmap of such buckets is striped, a sum over them
swings to nothing and back. Real sites sample every 10-30 s; the demo's history every 15 s.

Measured on a few GPUs (their gaps between samples in the range, a high percentile so that a mix of
slow history and fast live data takes the slow one), and only where a bucket under a minute is in
question: from a minute up, charts read the rollups.
"""

from __future__ import annotations

import math
from typing import Any

from psycopg import Connection

from gpuscope.collector.query.timerange import NICE_BUCKETS_S, TimeRange

PROBE_GPUS = 8
# A bucket this much wider than the usual gap holds a sample however the sampling jitters.
MARGIN = 1.2

_SPACING_SQL = (
    "SELECT percentile_disc(0.9) WITHIN GROUP (ORDER BY gap) FROM ("
    " SELECT extract(epoch FROM ts - lag(ts) OVER (PARTITION BY gpu_id ORDER BY ts))::float8 AS gap"
    " FROM gpu_sample WHERE gpu_id IN (SELECT gpu_id FROM gpu ORDER BY gpu_id LIMIT %(probe)s)"
    " AND ts >= %(start)s AND ts < %(end)s) gaps WHERE gap > 0"
)


def sample_spacing(conn: Connection[Any], time_range: TimeRange) -> float | None:
    """The usual gap between a GPU's samples in the range, in seconds (None: too few samples to tell)."""
    row = conn.execute(_SPACING_SQL, {"probe": PROBE_GPUS, "start": time_range.start, "end": time_range.end}).fetchone()
    return float(row[0]) if row and row[0] is not None else None


def fillable_bucket(conn: Connection[Any], time_range: TimeRange, bucket_s: int) -> int:
    """`bucket_s`, or the narrowest nice width above it that the range's samples fill."""
    return fillable_buckets(conn, time_range, bucket_s)[0]


def fillable_buckets(conn: Connection[Any], time_range: TimeRange, *buckets_s: int) -> tuple[int, ...]:
    """Each width widened as fillable_bucket() does, the range's spacing measured once for all of them
    (a page drawing several charts of one range)."""
    if all(b >= 60 for b in buckets_s):
        return buckets_s
    spacing = sample_spacing(conn, time_range)
    if spacing is None:
        return buckets_s
    floor = math.ceil(spacing * MARGIN)
    return tuple(
        b if b >= 60 else next((n for n in NICE_BUCKETS_S if n >= max(b, floor)), NICE_BUCKETS_S[-1]) for b in buckets_s
    )
