"""NVLink traffic of chosen GPUs over time: bytes per second transmitted and received over all of a
GPU's links, from its data counters (bytes since the driver loaded)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from psycopg import Connection

from gpuscope.collector.query.timerange import EPOCH, TimeRange

LOOK_BACK = timedelta(minutes=5)  # the first rate in the range needs the sample before it

# Increase over elapsed time between consecutive samples, per bucket; a step where a counter went down
# (a restart) is left out rather than shown as a huge negative rate.
_SQL = (
    "SELECT gpu_id, date_bin(%(bucket)s, ts, %(origin)s),"
    " sum(tx) FILTER (WHERE tx >= 0) / nullif(sum(dt) FILTER (WHERE tx >= 0), 0),"
    " sum(rx) FILTER (WHERE rx >= 0) / nullif(sum(dt) FILTER (WHERE rx >= 0), 0)"
    " FROM (SELECT gpu_id, ts, extract(epoch FROM ts - lag(ts) OVER w)::float8 AS dt,"
    "   nvlink_tx_bytes::float8 - lag(nvlink_tx_bytes::float8) OVER w AS tx,"
    "   nvlink_rx_bytes::float8 - lag(nvlink_rx_bytes::float8) OVER w AS rx"
    "   FROM gpu_sample WHERE ts >= %(look_back)s AND ts < %(end)s AND gpu_id = ANY(%(gpus)s) AND up"
    "   AND (nvlink_tx_bytes IS NOT NULL OR nvlink_rx_bytes IS NOT NULL)"
    "   WINDOW w AS (PARTITION BY gpu_id ORDER BY ts)) AS steps"
    " WHERE ts >= %(start)s AND dt > 0 AND (tx >= 0 OR rx >= 0) GROUP BY 1, 2"
)


@dataclass(frozen=True)
class NvlinkSeries:
    bucket_s: int
    gpu_ids: list[int]  # the GPUs asked about; a row of NaN: no NVLink data reported
    times: list[datetime]
    tx: np.ndarray  # bytes/s, shape (len(gpu_ids), len(times)); NaN where nothing was reported
    rx: np.ndarray

    def reported(self, gpu_id: int) -> bool:
        i = self.gpu_ids.index(gpu_id)
        return bool(np.isfinite(self.tx[i]).any() or np.isfinite(self.rx[i]).any())


def nvlink_throughput(
    conn: Connection[Any], time_range: TimeRange, bucket_s: int, gpu_ids: Sequence[int]
) -> NvlinkSeries:
    rows = conn.execute(
        _SQL,
        {
            "bucket": timedelta(seconds=bucket_s),
            "origin": EPOCH,
            "start": time_range.start,
            "end": time_range.end,
            "look_back": time_range.start - LOOK_BACK,
            "gpus": list(gpu_ids),
        },
    ).fetchall()
    times = time_range.buckets(bucket_s)
    tx = np.full((len(gpu_ids), len(times)), np.nan)
    rx = np.full_like(tx, np.nan)
    row_of = {gpu_id: i for i, gpu_id in enumerate(gpu_ids)}
    column_of = {t: j for j, t in enumerate(times)}
    for gpu_id, bucket, sent, received in rows:
        j = column_of.get(bucket)
        if j is None:
            continue
        if sent is not None:
            tx[row_of[gpu_id], j] = sent
        if received is not None:
            rx[row_of[gpu_id], j] = received
    return NvlinkSeries(bucket_s, list(gpu_ids), times, tx, rx)
