"""Power per rack over time: the sum over a rack's GPUs of each GPU's mean power in the bucket."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from psycopg import Connection, sql

from gpuscope.collector.query.cells import cells_query, splits_for
from gpuscope.collector.query.timerange import EPOCH, TimeRange

# A rack drawing this share of its budget is worth a look before it trips: electrical codes hold
# continuous loads to 80% of a breaker's rating, and a budget is usually that rating already derated.
# The one threshold: the overview's "near budget", the power page's colours and the shipped alert rule.
NEAR_BUDGET = 0.85
TEN_MINUTES = timedelta(minutes=10)  # rack_power_10m's rows (migration 0022)


@dataclass(frozen=True)
class RackPower:
    bucket_s: int
    racks: list[str]  # "cluster/rack"
    times: list[datetime]
    watts: np.ndarray  # shape (len(racks), len(times)); NaN where the rack reported nothing


def rack_power(conn: Connection[Any], time_range: TimeRange, bucket_s: int) -> RackPower:
    splits = splits_for(conn, bucket_s)
    if splits is None:
        per_gpu, params = cells_query("power_w", time_range, bucket_s, None)
        statement = sql.SQL(
            "SELECT n.cluster || '/' || n.rack, per_gpu.b, sum(per_gpu.watts)::float8"
            " FROM ({}) AS per_gpu (gpu_id, b, watts) JOIN gpu g USING (gpu_id) JOIN node n USING (node_id)"
            " WHERE per_gpu.watts IS NOT NULL GROUP BY 1, 2"
        ).format(per_gpu)
    else:
        statement, params = _from_rollups(time_range, bucket_s, splits.minute)
    times = time_range.buckets(bucket_s)
    # One row per rack, its buckets' column numbers and values packed (as cells.fetch_cells packs them):
    # a day at 10 minutes is 144 values a rack, and a Python object per value cost more than the query.
    rows = conn.execute(
        sql.SQL(
            "SELECT rack, string_agg(int4send(col), ''::bytea), string_agg(float8send(watts), ''::bytea) FROM ("
            " SELECT rack, round((date_part('epoch', b) - %(first_epoch)s) / %(bucket_s)s)::int4 AS col, watts"
            " FROM ({}) AS cells (rack, b, watts)) AS placed GROUP BY rack ORDER BY rack"
        ).format(statement),
        params | {"first_epoch": times[0].timestamp() if times else 0.0, "bucket_s": bucket_s},
        binary=True,
    ).fetchall()
    racks = [rack for rack, _, _ in rows]
    watts = np.full((len(racks), len(times)), np.nan)
    for i, (_, columns, values) in enumerate(rows):
        column = np.frombuffer(columns, ">i4")
        inside = (column >= 0) & (column < len(times))
        watts[i, column[inside]] = np.frombuffer(values, ">f8")[inside]
    return RackPower(bucket_s=bucket_s, racks=racks, times=times, watts=watts)


def _from_rollups(time_range: TimeRange, bucket_s: int, split: datetime) -> tuple[sql.Composed, dict[str, Any]]:
    """Per rack and bucket, the mean of the rack's minute figures: whole 10 minutes from rack_power_10m
    where the buckets are made of them, minutes from rack_power_1m up to `split` (the minute rollups'
    end), minutes built from raw samples after. Each part gives (sum of minute figures, minutes), so
    the parts add up to the exact mean whichever holds a bucket's minutes."""
    first = time_range.first_bucket(bucket_s)  # the first bucket whole, as cells_query reads it; whole minutes
    split = max(split, first)
    # A 10-minute row is complete once its last minute is before the split.
    tens_end = EPOCH + (split - EPOCH) // TEN_MINUTES * TEN_MINUTES if bucket_s % 600 == 0 else first
    params = {
        "bucket": timedelta(seconds=bucket_s),
        "origin": EPOCH,
        "start": first,
        "tens_end": max(tens_end, first),  # where the 10-minute rows stop and the minutes start
        "split": split,
        "end": time_range.end,
    }
    statement = sql.SQL(
        "SELECT cluster || '/' || rack, b, sum(s) / sum(n) FROM ("
        " SELECT cluster, rack, date_bin(%(bucket)s, bucket, %(origin)s) AS b, watts_sum AS s, minutes AS n"
        "  FROM rack_power_10m WHERE bucket >= %(start)s AND bucket < %(tens_end)s"
        " UNION ALL"
        " SELECT cluster, rack, date_bin(%(bucket)s, bucket, %(origin)s), watts, 1 FROM rack_power_1m"
        "  WHERE bucket >= %(tens_end)s AND bucket < %(split)s"
        " UNION ALL"
        " SELECT n.cluster, n.rack, date_bin(%(bucket)s, g_min.minute, %(origin)s), sum(g_min.watts), 1 FROM ("
        "  SELECT gpu_id, date_bin('1 minute', ts, %(origin)s) AS minute, avg(power_w) AS watts FROM gpu_sample"
        "  WHERE ts >= %(split)s AND ts < %(end)s AND power_w IS NOT NULL GROUP BY 1, 2) AS g_min"
        "  JOIN gpu g USING (gpu_id) JOIN node n USING (node_id) GROUP BY n.cluster, n.rack, g_min.minute"
        ") AS parts GROUP BY cluster, rack, b"
    ).format()
    return statement, params


def rack_nameplate_w(conn: Connection[Any]) -> dict[str, float]:
    """Each rack's GPU power limits summed ("cluster/rack" -> W), from each GPU's newest sample in the
    last 10 minutes: the budget a rack is held to when the site has not set one."""
    rows = conn.execute(
        "SELECT n.cluster || '/' || n.rack, sum(s.power_limit_w)::float8"
        " FROM gpu g JOIN node n USING (node_id)"
        " CROSS JOIN LATERAL (SELECT power_limit_w FROM gpu_sample x WHERE x.gpu_id = g.gpu_id"
        "   AND x.ts > now() - interval '10 minutes' ORDER BY x.ts DESC LIMIT 1) s"
        " GROUP BY 1 ORDER BY 1"
    ).fetchall()
    return {rack: watts for rack, watts in rows if watts is not None}
