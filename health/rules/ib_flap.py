"""InfiniBand link flaps: a port going down, recovering from link errors, or leaving ACTIVE, over a window.

What: per port and sample, the flaps since the sample before: the larger of ib_port_sample.link_downed's
rise (the link went down) and 1 if the port's state left ACTIVE (4) (the two see the same down, and a
down shorter than a sample shows in the counter only), plus link_error_recovery's rise (the link
recovered from errors without going down). A counter dropping is a restart (driver reload), not flaps.
Threshold: flaps of one port in the trailing 6 hours; 2 suspect, 5 unhealthy (EvidenceConfig says why:
Azure's health checks fail a node on any flap in 6 hours; one flap can be a switch's maintenance).
Action check_link. The finding is the node's (gpu_id None), its code the port's id (ib_port.port_id), so
that ports flapping at the same sample are told apart; its time the flap that reached the threshold.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection, sql

from gpuscope.health.model import Evidence, Severity
from gpuscope.health.rules.config import EvidenceConfig
from gpuscope.health.rules.crossing import Occurrence, crossings
from gpuscope.health.rules.places import port_places

KIND = "ib_flap"
ACTION = "check_link"
ACTIVE = 4  # IB logical port state (collector/query/node_health.py)

# Each sample with the one before it, and the flaps between them; {samples} names the rows read.
_FLAPS = sql.SQL("""
WITH {samples}
SELECT port_id, ts, flaps FROM (
    SELECT port_id, ts,
           greatest(coalesce(CASE WHEN downed < downed_before THEN downed ELSE downed - downed_before END, 0),
                    CASE WHEN state_before = %(active)s AND state <> %(active)s THEN 1 ELSE 0 END)
           + coalesce(CASE WHEN recovered < recovered_before THEN recovered ELSE recovered - recovered_before END, 0)
           AS flaps
    FROM (
        SELECT port_id, ts, link_downed AS downed, lag(link_downed) OVER w AS downed_before,
               link_error_recovery AS recovered, lag(link_error_recovery) OVER w AS recovered_before,
               state, lag(state) OVER w AS state_before
        FROM samples
        WINDOW w AS (PARTITION BY port_id ORDER BY ts)
    ) AS steps
    WHERE ts > %(since)s
) AS flapped
WHERE flaps > 0
ORDER BY port_id, ts
""")
# Every port's samples in the window, and the latest before it by index (port_id, ts): one row per port
# (the ports come from the inventory, so the window's rows are read once).
_IN_WINDOW = sql.SQL("""
in_window AS (
    SELECT port_id, ts, link_downed, link_error_recovery, state FROM ib_port_sample
    WHERE ts > %(since)s AND ts <= %(until)s
), samples AS (
    SELECT * FROM in_window
    UNION ALL
    SELECT b.* FROM ib_port AS p CROSS JOIN LATERAL (
        SELECT port_id, ts, link_downed, link_error_recovery, state FROM ib_port_sample s
        WHERE s.port_id = p.port_id AND s.ts > %(scan_from)s AND s.ts <= %(since)s ORDER BY s.ts DESC LIMIT 1
    ) AS b
)
""")
# The history of the ports that flapped in the window.
_HISTORY = sql.SQL("""
samples AS (
    SELECT port_id, ts, link_downed, link_error_recovery, state FROM ib_port_sample
    WHERE port_id = ANY(%(ports)s) AND ts > %(scan_from)s AND ts <= %(until)s
)
""")


async def ib_flap_evidence(
    conn: AsyncConnection[Any], since: datetime, until: datetime, config: EvidenceConfig
) -> list[Evidence]:
    # The window's own flaps first, over every port; then the history of the ports that flapped in it.
    window = {"scan_from": since - config.look_back, "since": since, "until": until, "active": ACTIVE}
    cur = await conn.execute(_FLAPS.format(samples=_IN_WINDOW), window)
    flapped = sorted({port_id for port_id, _, _ in await cur.fetchall()})
    if not flapped:
        return []
    history_from = since - config.ib_window
    cur = await conn.execute(
        _FLAPS.format(samples=_HISTORY),
        {**window, "ports": flapped, "scan_from": history_from - config.look_back, "since": history_from},
    )
    history: dict[int, list[Occurrence]] = defaultdict(list)
    for port_id, at, flaps in await cur.fetchall():
        history[port_id].append(Occurrence(at, int(flaps)))
    places = await port_places(conn, history)
    thresholds = [(config.ib_suspect, Severity.SUSPECT), (config.ib_unhealthy, Severity.UNHEALTHY)]
    hours = config.ib_window.total_seconds() / 3600
    found = []
    for port_id, occurrences in history.items():
        place = places.get(port_id)
        if place is None:  # not in the inventory: nothing to name it by
            continue
        for crossing in crossings(occurrences, config.ib_window, thresholds, since):
            detail = f"InfiniBand {place.name} flapped {crossing.total} times in {hours:g} h"
            found.append(
                Evidence(
                    at=crossing.at,
                    node_id=place.node_id,
                    gpu_id=None,
                    kind=KIND,
                    severity=crossing.severity,
                    detail=detail,
                    code=port_id,
                    action=ACTION,
                )
            )
    return found
