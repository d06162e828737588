"""One pass over the GPU samples of a window: the samples where something changed that a rule reads.

Each sample is compared with the GPU's sample before it. Up and down are compared over all samples; the
counters and flags over the samples where the GPU answered (up), so that their step spans an outage
rather than stopping at it: a GPU answers nothing while lost, and its values there are NULL. For the
window's first sample the one before is looked up by index (gpu_id, ts), up to `look_back` back: one row
per GPU, not ten minutes of every GPU's rows.

A counter's rise follows collector/query/counters.py: a drop is a restart (driver reload, GPU reset),
from which the new value is what rose; the first sample of a GPU in reach has nothing to rise from.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from gpuscope.health.rules.config import EvidenceConfig


@dataclass(frozen=True)
class GpuStep:
    gpu_id: int
    at: datetime
    lost: bool  # up before, not up now
    ecc_rise: int  # uncorrectable ECC errors since the sample before
    ecc_now: int | None
    remap_pending_set: bool  # the flag is 1 and was not before (or nothing before)
    remap_failure_set: bool
    nvlink_recoveries: int  # NVLink recovery errors since the sample before
    nvlink_crc_burst: bool  # CRC errors at or above the burst rate since the sample before
    slowed: bool  # a slowdown reason set while under the power limit's fraction
    clock_event_reasons: int | None


# The window's samples and, per GPU, the latest one before the window (and the latest up one, if that was
# down; the GPUs come from the inventory, so the window's rows are read once); each with the one before
# it (lags); what changed (rises, flags); the samples where anything did.
# The counter columns are NULL in a lost GPU's samples, so its steps are NULL too.
_SQL = """
WITH in_window AS (
    SELECT gpu_id, ts, up, ecc_uncorrected, remap_pending, remap_failure, nvlink_recovery_errors,
           nvlink_crc_errors, clock_event_reasons, power_w, power_limit_w
    FROM gpu_sample WHERE ts > %(since)s AND ts <= %(until)s
), latest AS (
    SELECT b.* FROM gpu AS g CROSS JOIN LATERAL (
        SELECT gpu_id, ts, up, ecc_uncorrected, remap_pending, remap_failure, nvlink_recovery_errors,
               nvlink_crc_errors, clock_event_reasons, power_w, power_limit_w
        FROM gpu_sample s WHERE s.gpu_id = g.gpu_id AND s.ts > %(scan_from)s AND s.ts <= %(since)s
        ORDER BY s.ts DESC LIMIT 1
    ) AS b
), latest_up AS (
    SELECT b.* FROM latest AS l CROSS JOIN LATERAL (
        SELECT gpu_id, ts, up, ecc_uncorrected, remap_pending, remap_failure, nvlink_recovery_errors,
               nvlink_crc_errors, clock_event_reasons, power_w, power_limit_w
        FROM gpu_sample s WHERE s.gpu_id = l.gpu_id AND s.up AND s.ts > %(scan_from)s AND s.ts < l.ts
        ORDER BY s.ts DESC LIMIT 1
    ) AS b
    WHERE NOT l.up
)
SELECT gpu_id, ts, lost, coalesce(ecc_rise, 0), ecc, pending_set, failure_set, coalesce(recoveries, 0),
       crc_burst, slowed, reasons
FROM (
    SELECT gpu_id, ts, ecc, reasons,
           coalesce(NOT up AND was_up, false) AS lost,
           CASE WHEN ecc < ecc_before THEN ecc ELSE ecc - ecc_before END AS ecc_rise,
           coalesce(up AND pending = 1 AND pending_before IS DISTINCT FROM 1, false) AS pending_set,
           coalesce(up AND failure = 1 AND failure_before IS DISTINCT FROM 1, false) AS failure_set,
           CASE WHEN recovery < recovery_before THEN recovery ELSE recovery - recovery_before END AS recoveries,
           coalesce(crc > crc_before AND ts > ts_before
                    AND (crc - crc_before) / extract(epoch FROM ts - ts_before) >= %(crc_burst)s, false) AS crc_burst,
           coalesce(up AND reasons & %(reasons)s <> 0 AND power_w < %(fraction)s * power_limit_w, false) AS slowed
    FROM (
        SELECT gpu_id, ts, up, lag(up) OVER by_gpu AS was_up,
               ecc_uncorrected AS ecc, lag(ecc_uncorrected) OVER answered AS ecc_before,
               remap_pending AS pending, lag(remap_pending) OVER answered AS pending_before,
               remap_failure AS failure, lag(remap_failure) OVER answered AS failure_before,
               nvlink_recovery_errors AS recovery, lag(nvlink_recovery_errors) OVER answered AS recovery_before,
               nvlink_crc_errors::float8 AS crc, lag(nvlink_crc_errors::float8) OVER answered AS crc_before,
               lag(ts) OVER answered AS ts_before,
               clock_event_reasons AS reasons, power_w, power_limit_w
        FROM (SELECT * FROM in_window UNION ALL SELECT * FROM latest UNION ALL SELECT * FROM latest_up) AS rows
        WINDOW by_gpu AS (PARTITION BY gpu_id ORDER BY ts), answered AS (PARTITION BY gpu_id, up ORDER BY ts)
    ) AS samples
    WHERE ts > %(since)s
) AS steps
WHERE lost OR ecc_rise > 0 OR pending_set OR failure_set OR recoveries > 0 OR crc_burst OR slowed
ORDER BY gpu_id, ts
"""


async def gpu_steps(
    conn: AsyncConnection[Any], since: datetime, until: datetime, config: EvidenceConfig
) -> list[GpuStep]:
    """The samples in (since, until] where a GPU was lost or a counter, flag or slowdown says something."""
    cur = await conn.execute(
        _SQL,
        {
            "scan_from": since - config.look_back,
            "since": since,
            "until": until,
            "crc_burst": config.nvlink_crc_burst_per_s,
            "reasons": config.thermal_reasons,
            "fraction": config.thermal_power_fraction,
        },
    )
    return [GpuStep(*row) for row in await cur.fetchall()]
