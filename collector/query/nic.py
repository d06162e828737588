"""InfiniBand port series: counters as rates per second, gauges (state, link rate) as bucket means."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from psycopg import Connection, sql

from gpuscope.collector.query.inventory import PortRow
from gpuscope.collector.query.timerange import EPOCH, TimeRange
from gpuscope.collector.store.columns import PORT_METRICS

LOOK_BACK = timedelta(minutes=5)  # a counter's first rate in the range needs the sample before it


@dataclass(frozen=True)
class NicSeries:
    metric: str
    per_second: bool  # True: values are rates of a counter
    bucket_s: int
    ports: list[PortRow]
    times: list[datetime]
    values: np.ndarray  # shape (len(ports), len(times)); NaN where nothing was reported


def nic_series(
    conn: Connection[Any], metric: str, time_range: TimeRange, bucket_s: int, ports: Sequence[PortRow]
) -> NicSeries:
    column = PORT_METRICS.get(metric)
    if column is None:
        raise ValueError(f"unknown port metric {metric!r}; one of {sorted(PORT_METRICS)}")
    m = sql.Identifier(metric)
    if column.counter:
        # Increase over elapsed time between consecutive samples; an interval where the counter went
        # down (reset, or a replaced card) is left out rather than shown as a huge negative rate.
        # In numeric: bigint arithmetic overflows on a difference beyond 2^63-1 (rows an older collector
        # stored wrapped to -2^63), and a read must not fail on what is stored.
        statement = sql.SQL(
            "SELECT port_id, date_bin(%(bucket)s, ts, %(origin)s), sum(d)::float8 / nullif(sum(dt), 0) FROM ("
            " SELECT port_id, ts, {m}::numeric - lag({m}::numeric) OVER w AS d,"
            " extract(epoch FROM ts - lag(ts) OVER w) AS dt"
            " FROM ib_port_sample WHERE ts >= %(look_back)s AND ts < %(end)s AND port_id = ANY(%(ports)s)"
            " WINDOW w AS (PARTITION BY port_id ORDER BY ts)) AS steps"
            " WHERE ts >= %(start)s AND d >= 0 GROUP BY 1, 2"
        ).format(m=m)
    else:
        statement = sql.SQL(
            "SELECT port_id, date_bin(%(bucket)s, ts, %(origin)s), avg({m})::float8 FROM ib_port_sample"
            " WHERE ts >= %(start)s AND ts < %(end)s AND port_id = ANY(%(ports)s) GROUP BY 1, 2"
        ).format(m=m)
    rows = conn.execute(
        statement,
        {
            "bucket": timedelta(seconds=bucket_s),
            "origin": EPOCH,
            "start": time_range.start,
            "end": time_range.end,
            "look_back": time_range.start - LOOK_BACK,
            "ports": [p.port_id for p in ports],
        },
    ).fetchall()
    times = time_range.buckets(bucket_s)
    values = np.full((len(ports), len(times)), np.nan)
    row_of = {p.port_id: i for i, p in enumerate(ports)}
    column_of = {t: j for j, t in enumerate(times)}
    for port_id, bucket, value in rows:
        j = column_of.get(bucket)
        if j is not None and value is not None:
            values[row_of[port_id], j] = value
    return NicSeries(metric, column.counter, bucket_s, list(ports), times, values)
