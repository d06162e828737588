"""XID errors through NVIDIA's catalogue (health/xid_catalog.csv).

What: every XID event the exporters reported in the window (table event, kind 'xid', code = the XID).
Threshold: one event; its severity and action are the catalogue's, so an application's own fault (XID
13, 31, 43, 45) is recorded as `ignore` and changes no state, while XID 79 (fallen off the bus) asks for
a reboot and XID 48 (double-bit ECC) for a reset. XID 154 takes the recovery action its message names
where the exporter stored the message. Why and source: health/xid_catalog.py.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from gpuscope.core.gpu_events import UNKNOWN_XID, XID
from gpuscope.health.model import Evidence
from gpuscope.health.xid_catalog import xid_rule

KIND = "xid"


async def xid_evidence(conn: AsyncConnection[Any], since: datetime, until: datetime) -> list[Evidence]:
    cur = await conn.execute(
        "SELECT e.ts, e.node_id, e.gpu_id, g.gpu_index, e.code, e.count, e.message"
        " FROM event e LEFT JOIN gpu g USING (gpu_id)"
        " WHERE e.kind = %s AND e.ts > %s AND e.ts <= %s ORDER BY e.ts, e.event_id",
        (XID, since, until),
    )
    found = []
    for at, node_id, gpu_id, gpu_index, code, count, message in await cur.fetchall():
        code = UNKNOWN_XID if code is None else code
        rule = xid_rule(code, message)
        where = "the node" if gpu_index is None else f"GPU {gpu_index}"
        times = f", {count} times" if count > 1 else ""
        detail = f"XID {code} ({rule.meaning}) on {where}{times}"
        found.append(Evidence(at, node_id, gpu_id, KIND, rule.severity, detail, code, rule.action, gpu_index))
    return found
