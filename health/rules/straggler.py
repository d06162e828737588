"""A repeat straggler: the same GPU, or the same node (a slow host or NIC), named the culprit in different
jobs within a window.

What: straggler rows (the detector's, collector/stragglers), by culprit: the GPU it names, else the node
(its host or a NIC: straggler.gpu_id NULL), and by job.
Threshold: 2 different jobs within 7 days, suspect. Why: one job slow on a GPU or node can be the job (its
data, its placement); the same GPU or node slowing a second, unrelated job is the hardware: blame the node,
not the job. Action run_diagnostics.
The finding's time is the declaration (declared_at, when the detector knew) of the straggler that
brought in the second job; stragglers are read by start (its index) from two windows back, since a
declaration follows its start by minutes, never by a week.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from gpuscope.health.model import Evidence, Severity
from gpuscope.health.rules.config import EvidenceConfig

KIND = "repeat_straggler"
ACTION = "run_diagnostics"


@dataclass(frozen=True)
class _Straggler:
    node_id: int
    gpu_index: int | None  # None: the node itself (its host or a NIC)
    job_id: str
    cause: str
    declared_at: datetime


async def straggler_evidence(
    conn: AsyncConnection[Any], since: datetime, until: datetime, config: EvidenceConfig
) -> list[Evidence]:
    cur = await conn.execute(
        "SELECT s.gpu_id, s.node_id, g.gpu_index, s.job_id, s.cause, s.declared_at"
        " FROM straggler s LEFT JOIN gpu g USING (gpu_id)"
        # A finding about the whole job (the fabric, another job's traffic) blames no node.
        " WHERE s.node_id IS NOT NULL AND s.started_at > %s AND s.started_at <= %s AND s.declared_at <= %s"
        " ORDER BY s.node_id, s.gpu_id NULLS FIRST, s.declared_at, s.straggler_id",
        (since - 2 * config.straggler_window, until, until),
    )
    by_culprit: dict[tuple[int, int | None], list[_Straggler]] = defaultdict(list)
    for gpu_id, *row in await cur.fetchall():
        straggler = _Straggler(*row)
        by_culprit[(straggler.node_id, gpu_id)].append(straggler)
    found = []
    for (_, gpu_id), stragglers in by_culprit.items():
        for i, latest in enumerate(stragglers):
            if latest.declared_at <= since:
                continue
            # In time order, so the window ending at this one is a run of the list ending here.
            recent = [s for s in stragglers[: i + 1] if s.declared_at >= latest.declared_at - config.straggler_window]
            jobs = dict.fromkeys(s.job_id for s in recent)
            before = {s.job_id for s in recent[:-1]}
            if len(jobs) >= config.straggler_jobs > len(before):
                found.append(_repeat(gpu_id, latest, recent, len(jobs), config))
    return found


def _repeat(
    gpu_id: int | None, latest: _Straggler, recent: list[_Straggler], jobs: int, config: EvidenceConfig
) -> Evidence:
    causes = {s.job_id: s.cause for s in recent}
    named = ", ".join(f"{job} ({cause})" for job, cause in causes.items())
    days = config.straggler_window.total_seconds() / 86400
    culprit = "The node" if latest.gpu_index is None else f"GPU {latest.gpu_index}"
    detail = f"{culprit} was the straggler in {jobs} jobs within {days:g} days: {named}"
    return Evidence(
        at=latest.declared_at,
        node_id=latest.node_id,
        gpu_id=gpu_id,
        kind=KIND,
        severity=Severity.SUSPECT,
        detail=detail,
        action=ACTION,
        gpu_index=latest.gpu_index,
    )
