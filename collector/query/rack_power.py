"""Power per rack over time: the sum over a rack's GPUs of each GPU's mean power in the bucket."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from psycopg import Connection

from collector.query.timerange import EPOCH, TimeRange


@dataclass(frozen=True)
class RackPower:
    bucket_s: int
    racks: list[str]  # "cluster/rack"
    times: list[datetime]
    watts: np.ndarray  # shape (len(racks), len(times)); NaN where the rack reported nothing


def rack_power(conn: Connection[Any], time_range: TimeRange, bucket_s: int) -> RackPower:
    cells = conn.execute(
        "SELECT n.cluster || '/' || n.rack, per_gpu.bucket, sum(per_gpu.watts)::float8"
        " FROM (SELECT gpu_id, date_bin(%(bucket)s, ts, %(origin)s) AS bucket, avg(power_w) AS watts"
        "       FROM gpu_sample WHERE ts >= %(start)s AND ts < %(end)s AND power_w IS NOT NULL"
        "       GROUP BY 1, 2) AS per_gpu"
        " JOIN gpu g USING (gpu_id) JOIN node n USING (node_id)"
        " GROUP BY 1, 2",
        {"bucket": timedelta(seconds=bucket_s), "origin": EPOCH, "start": time_range.start, "end": time_range.end},
    ).fetchall()
    racks = sorted({rack for rack, _, _ in cells})
    times = time_range.buckets(bucket_s)
    watts = np.full((len(racks), len(times)), np.nan)
    row_of = {rack: i for i, rack in enumerate(racks)}
    column_of = {t: j for j, t in enumerate(times)}
    for rack, bucket, value in cells:
        j = column_of.get(bucket)
        if j is not None:
            watts[row_of[rack], j] = value
    return RackPower(bucket_s=bucket_s, racks=racks, times=times, watts=watts)
