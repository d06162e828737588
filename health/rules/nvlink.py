"""NVLink flaps: a GPU's NVLinks recovering (retraining) or bursting CRC errors, counted over a window.

What: gpu_sample.nvlink_recovery_errors (NVML's DL recovery count, summed over the GPU's links) rising,
each recovery one flap; and a sample whose nvlink_crc_errors rose at or above the burst rate (100/s),
one flap. Threshold: flaps in the trailing hour; 1 suspect, 3 unhealthy (EvidenceConfig says why: DCGM's
health watch fails a GPU on one recovery, and on CRC errors only at 100 per second). Action check_link.
The finding's time is the flap that reached the threshold (crossing.py), so it is reported once.
Replay errors are left out: a replay is a retransmission that succeeded, and no published threshold
separates a bad link's replays from a good one's. AMD's XGMI links report no error counts to gpuscope.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from gpuscope.health.model import Evidence, Severity
from gpuscope.health.rules.config import EvidenceConfig
from gpuscope.health.rules.crossing import Crossing, Occurrence
from gpuscope.health.rules.gpu_crossings import gpu_crossings
from gpuscope.health.rules.gpu_steps import GpuStep
from gpuscope.health.rules.places import GpuPlace

KIND = "nvlink_flap"
ACTION = "check_link"

# The flaps of the given GPUs' samples, as gpu_steps.py reads them, over a longer window.
_FLAPS = """
SELECT gpu_id, ts, flaps FROM (
    SELECT gpu_id, ts,
           coalesce(CASE WHEN recovery < recovery_before THEN recovery ELSE recovery - recovery_before END, 0)
           + CASE WHEN crc > crc_before AND ts > ts_before
                       AND (crc - crc_before) / extract(epoch FROM ts - ts_before) >= %(crc_burst)s
                  THEN 1 ELSE 0 END AS flaps
    FROM (
        SELECT gpu_id, ts, nvlink_recovery_errors AS recovery, lag(nvlink_recovery_errors) OVER w AS recovery_before,
               nvlink_crc_errors::float8 AS crc, lag(nvlink_crc_errors::float8) OVER w AS crc_before,
               lag(ts) OVER w AS ts_before
        FROM gpu_sample
        WHERE gpu_id = ANY(%(gpus)s) AND up AND ts > %(scan_from)s AND ts <= %(until)s
        WINDOW w AS (PARTITION BY gpu_id ORDER BY ts)
    ) AS samples
) AS steps
WHERE flaps > 0
ORDER BY gpu_id, ts
"""


async def nvlink_evidence(
    conn: AsyncConnection[Any],
    steps: Sequence[GpuStep],
    places: dict[int, GpuPlace],
    since: datetime,
    until: datetime,
    config: EvidenceConfig,
) -> list[Evidence]:
    # Only a GPU with a flap in (since, until] can cross a threshold there: its history alone is read.
    flapped = sorted({s.gpu_id for s in steps if s.nvlink_recoveries > 0 or s.nvlink_crc_burst})
    if not flapped:
        return []
    cur = await conn.execute(
        _FLAPS,
        {
            "gpus": flapped,
            "scan_from": since - config.nvlink_window - config.look_back,
            "until": until,
            "crc_burst": config.nvlink_crc_burst_per_s,
        },
    )
    history: dict[int, list[Occurrence]] = defaultdict(list)
    for gpu_id, at, flaps in await cur.fetchall():
        history[gpu_id].append(Occurrence(at, int(flaps)))
    thresholds = [(config.nvlink_suspect, Severity.SUSPECT), (config.nvlink_unhealthy, Severity.UNHEALTHY)]
    hours = config.nvlink_window.total_seconds() / 3600

    def words(_: int, place: GpuPlace, crossing: Crossing) -> str:
        return (
            f"NVLink flapping on GPU {place.gpu_index}: {crossing.total} link recoveries or CRC bursts in {hours:g} h"
        )

    return gpu_crossings(history, places, config.nvlink_window, thresholds, since, KIND, ACTION, words)
