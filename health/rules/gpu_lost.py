"""A GPU lost: it stopped answering the exporter (fallen off the bus, or the driver gave it up).

What: a 'gpu_lost' event from the exporter, or a GPU sample with up = false after one with up = true
(the exporter reports a GPU it cannot read as down). A GPU that sends nothing for a while is not lost:
a gap is the exporter's or the network's, and the GPU is judged again when its samples return.
Threshold: one. Severity unhealthy, action reboot_node: NVIDIA's catalogue answers XID 79, the GPU off
the bus, with RESTART_BM (the node's reboot), and a GPU the driver cannot reach runs no job.
On AMD GPUs the exporter reports the same up = false (exporter/sources/amdsmi.py), so this rule covers them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from gpuscope.core.gpu_events import GPU_LOST
from gpuscope.health.model import Evidence, Severity
from gpuscope.health.rules.gpu_steps import GpuStep
from gpuscope.health.rules.places import GpuPlace

KIND = "gpu_lost"
ACTION = "reboot_node"


def lost_in_samples(steps: Sequence[GpuStep], places: dict[int, GpuPlace]) -> list[Evidence]:
    return [
        _lost(step.at, place.node_id, step.gpu_id, place.gpu_index)
        for step in steps
        if step.lost and (place := places.get(step.gpu_id)) is not None
    ]


async def lost_in_events(conn: AsyncConnection[Any], since: datetime, until: datetime) -> list[Evidence]:
    cur = await conn.execute(
        "SELECT e.ts, e.node_id, e.gpu_id, g.gpu_index FROM event e LEFT JOIN gpu g USING (gpu_id)"
        " WHERE e.kind = %s AND e.ts > %s AND e.ts <= %s ORDER BY e.ts, e.event_id",
        (GPU_LOST, since, until),
    )
    return [_lost(at, node_id, gpu_id, gpu_index) for at, node_id, gpu_id, gpu_index in await cur.fetchall()]


def _lost(at: datetime, node_id: int, gpu_id: int | None, gpu_index: int | None) -> Evidence:
    what = "a GPU" if gpu_index is None else f"GPU {gpu_index}"
    detail = f"{what} lost: the exporter can no longer read it (fallen off the bus?)"
    return Evidence(at, node_id, gpu_id, KIND, Severity.UNHEALTHY, detail, None, ACTION, gpu_index)
