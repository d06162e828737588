"""The driver's own verdict on a GPU: NVML's GPU recovery action, and the XIDs it speaks for.

What: gpu_sample.recovery_action, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (field 230) as the exporter reads it
each cycle: what the driver says must be done before the GPU is trusted again. NULL where the driver
predates the field (or an exporter predates gpuscope reading it): absent, never "none".
Threshold: a crossing. A GPU's action turns to something other than none (0) from none, from absent (the
first reported sample of a GPU in reach counts, as in remap.py) or from another action (drain P2P, once
drained, names the next one). A GPU that stays at one action is one finding, not one per sample. The
value before a window's first sample is its newest sample from a cycle the GPU answered, up to
`look_back` back: a GPU lost meanwhile reports nothing, and that is not the driver changing its mind.
Severity and action, from NVIDIA's description of each action (GPU Memory Error Management, "Error
Recovery and Response Flags"; nvml.h nvmlDeviceGpuRecoveryAction_t):

  1 GPU_RESET, 4 DRAIN_AND_RESET, 6 BUS_RESET -> unhealthy, reset_gpu: the GPU cannot recover without a
    reset ("terminate all GPU processes, reset the GPU"; the drain first; or its PCIe bus's reset)
  2 NODE_REBOOT, 7 SYSTEM_REBOOT -> unhealthy, reboot_node: the fault may have left the OS inconsistent
  3 DRAIN_P2P -> suspect, drain_p2p: "all peer-to-peer traffic to be quiesced" (stop the processes that
    use it, disable UVM persistence); once drained the driver names the next action, which crosses anew
  5 RECOVER_IMEX_DOMAIN -> suspect, check_imex_domain: the multi-node NVLink (IMEX) domain the GPU
    belongs to needs recovering, not this node alone
  a value newer than these -> suspect, follow_recovery_action
`code` is the NVML value; the detail says it in words ("the driver asks for a node reboot (NVML recovery
action 2) on GPU 3").

The driver is preferred over the XID catalogue: an XID on a GPU whose recovery action, in its newest
reported sample at or before the XID and within DRIVER_VERDICT_WITHIN, is not none takes the driver's
severity and action, and its detail says so (" (the driver asks for a node reboot)"). An application's
XID 13 on a GPU whose driver asks for a reboot is the reboot. None or absent: the catalogue, as before
(health/rules/xid.py). The driver sees the GPU's state; the catalogue only the XID's usual meaning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection

from gpuscope.health.model import Evidence, Severity
from gpuscope.health.rules.config import EvidenceConfig
from gpuscope.health.rules.places import gpu_places
from gpuscope.health.rules.xid import KIND as XID_KIND

KIND = "recovery_action"
NONE = 0
# How old the driver's word may be when an XID arrives: a sample a few cycles back, not last week's.
DRIVER_VERDICT_WITHIN = timedelta(minutes=5)


@dataclass(frozen=True)
class DriverVerdict:
    severity: Severity
    action: str
    words: str  # "the driver asks for <words>"


VERDICTS = {
    1: DriverVerdict(Severity.UNHEALTHY, "reset_gpu", "a GPU reset"),
    2: DriverVerdict(Severity.UNHEALTHY, "reboot_node", "a node reboot"),
    3: DriverVerdict(Severity.SUSPECT, "drain_p2p", "its peer-to-peer traffic drained"),
    4: DriverVerdict(Severity.UNHEALTHY, "reset_gpu", "a drain and a GPU reset"),
    5: DriverVerdict(Severity.SUSPECT, "check_imex_domain", "its IMEX domain recovered"),
    6: DriverVerdict(Severity.UNHEALTHY, "reset_gpu", "a reset of the GPU's PCIe bus"),
    7: DriverVerdict(Severity.UNHEALTHY, "reboot_node", "a system reboot"),
}


def driver_verdict(code: int) -> DriverVerdict:
    """What NVML recovery action `code` (not none) asks of the fleet."""
    return VERDICTS.get(code) or DriverVerdict(Severity.SUSPECT, "follow_recovery_action", "an action gpuscope lacks")


# The window's reported values, and per GPU the newest value before it from a sample where the GPU
# answered (one index probe per GPU); each with the value before it; where it turned to an action.
_CROSSINGS = """
WITH in_window AS (
    SELECT gpu_id, ts, recovery_action AS action FROM gpu_sample
    WHERE ts > %(since)s AND ts <= %(until)s AND recovery_action IS NOT NULL
), latest AS (
    SELECT b.* FROM gpu AS g CROSS JOIN LATERAL (
        SELECT gpu_id, ts, recovery_action AS action FROM gpu_sample s
        WHERE s.gpu_id = g.gpu_id AND s.up AND s.ts > %(scan_from)s AND s.ts <= %(since)s
        ORDER BY s.ts DESC LIMIT 1
    ) AS b
    WHERE b.action IS NOT NULL
)
SELECT gpu_id, ts, action FROM (
    SELECT gpu_id, ts, action, lag(action) OVER (PARTITION BY gpu_id ORDER BY ts) AS before
    FROM (SELECT * FROM in_window UNION ALL SELECT * FROM latest) AS reported
) AS steps
WHERE ts > %(since)s AND action <> 0 AND action IS DISTINCT FROM before
ORDER BY gpu_id, ts
"""


async def recovery_evidence(
    conn: AsyncConnection[Any], since: datetime, until: datetime, config: EvidenceConfig
) -> list[Evidence]:
    """A finding where a GPU's recovery action turned to something in (since, until]."""
    cur = await conn.execute(_CROSSINGS, {"since": since, "until": until, "scan_from": since - config.look_back})
    rows = await cur.fetchall()
    places = await gpu_places(conn, (gpu_id for gpu_id, _, _ in rows))
    found = []
    for gpu_id, at, code in rows:
        place = places.get(gpu_id)
        if place is None:  # not in the inventory: nothing to name it by
            continue
        verdict = driver_verdict(code)
        detail = f"the driver asks for {verdict.words} (NVML recovery action {code}) on GPU {place.gpu_index}"
        found.append(
            Evidence(at, place.node_id, gpu_id, KIND, verdict.severity, detail, code, verdict.action, place.gpu_index)
        )
    return found


# Per XID on a GPU: the GPU's newest reported recovery action at or before it, within the bound.
_AT_XIDS = """
SELECT x.i, s.recovery_action
FROM unnest(%(gpu_ids)s::integer[], %(ats)s::timestamptz[]) WITH ORDINALITY AS x(gpu_id, at, i)
CROSS JOIN LATERAL (
    SELECT recovery_action FROM gpu_sample
    WHERE gpu_id = x.gpu_id AND ts <= x.at AND ts > x.at - %(within)s AND recovery_action IS NOT NULL
    ORDER BY ts DESC LIMIT 1
) AS s
"""


async def prefer_driver(conn: AsyncConnection[Any], found: Sequence[Evidence]) -> list[Evidence]:
    """`found` with each XID on a GPU whose driver asked for an action then judged by that action."""
    xids = [e for e in found if e.kind == XID_KIND and e.gpu_id is not None]
    if not xids:
        return list(found)
    cur = await conn.execute(
        _AT_XIDS,
        {"gpu_ids": [e.gpu_id for e in xids], "ats": [e.at for e in xids], "within": DRIVER_VERDICT_WITHIN},
    )
    asked = {id(xids[i - 1]): action for i, action in await cur.fetchall() if action != NONE}
    return [_judged_by_driver(e, asked[id(e)]) if id(e) in asked else e for e in found]


def _judged_by_driver(xid: Evidence, code: int) -> Evidence:
    verdict = driver_verdict(code)
    detail = f"{xid.detail} (the driver asks for {verdict.words})"
    return replace(xid, severity=verdict.severity, action=verdict.action, detail=detail)
