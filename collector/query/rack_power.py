"""Power per rack over time: the sum over a rack's GPUs of each GPU's mean power in the bucket."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from psycopg import Connection, sql

from gpuscope.collector.query.buckets import source_of
from gpuscope.collector.query.cells import cells_query, rollup_splits
from gpuscope.collector.query.timerange import EPOCH, TimeRange

# A rack drawing this share of its budget is worth a look before it trips: electrical codes hold
# continuous loads to 80% of a breaker's rating, and a budget is usually that rating already derated.
# The one threshold: the overview's "near budget", the power page's colours and the shipped alert rule.
NEAR_BUDGET = 0.85


@dataclass(frozen=True)
class RackPower:
    bucket_s: int
    racks: list[str]  # "cluster/rack"
    times: list[datetime]
    watts: np.ndarray  # shape (len(racks), len(times)); NaN where the rack reported nothing


def rack_power(conn: Connection[Any], time_range: TimeRange, bucket_s: int) -> RackPower:
    split = rollup_splits(conn).minute if source_of(bucket_s) != "raw" else None
    if split is None:
        per_gpu, params = cells_query("power_w", time_range, bucket_s, None)
        statement = sql.SQL(
            "SELECT n.cluster || '/' || n.rack, per_gpu.b, sum(per_gpu.watts)::float8"
            " FROM ({}) AS per_gpu (gpu_id, b, watts) JOIN gpu g USING (gpu_id) JOIN node n USING (node_id)"
            " WHERE per_gpu.watts IS NOT NULL GROUP BY 1, 2"
        ).format(per_gpu)
    else:
        # Per rack and minute: from rack_power_1m where settled, from raw samples after; then the
        # mean over each bucket's minutes.
        params = {
            "bucket": timedelta(seconds=bucket_s),
            "origin": EPOCH,
            "start": time_range.buckets(bucket_s)[0],  # the first bucket whole, as cells_query reads it
            "end": time_range.end,
            "split": max(split, time_range.buckets(bucket_s)[0]),
        }
        statement = sql.SQL(
            "SELECT rack, date_bin(%(bucket)s, minute, %(origin)s), avg(watts) FROM ("
            " SELECT cluster || '/' || rack AS rack, bucket AS minute, watts FROM rack_power_1m"
            "  WHERE bucket >= date_bin('1 minute', %(start)s::timestamptz, %(origin)s) AND bucket < %(split)s"
            " UNION ALL"
            " SELECT n.cluster || '/' || n.rack, g_min.minute, sum(g_min.watts) FROM ("
            "  SELECT gpu_id, date_bin('1 minute', ts, %(origin)s) AS minute, avg(power_w) AS watts FROM gpu_sample"
            "  WHERE ts >= %(split)s AND ts < %(end)s AND power_w IS NOT NULL GROUP BY 1, 2) AS g_min"
            "  JOIN gpu g USING (gpu_id) JOIN node n USING (node_id) GROUP BY 1, 2"
            ") AS minutes GROUP BY 1, 2"
        ).format()
    cells = conn.execute(statement, params).fetchall()
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
