"""GPUs that running jobs hold idle, as the shipped GpuIdleInJob rule (alerts/default_rules.yaml) judges
them: the GPU's latest utilisation under IDLE_BELOW_PCT, held for the rule's `for` (IDLE_FOR). Read from
the samples here, so that the pages say it whether or not the alert engine runs: every sample of the
last IDLE_FOR under the threshold, the newest within LATEST_WITHIN (what the alert views' gpu_latest
still calls latest), and the GPU held by the job all along. A MIG device reports no utilisation (NVML
has none in MIG mode): never idle by this test, as by the rule's. JobHoldsIdleGpus, the waste rule, is
the same test for half a job's GPUs over two hours."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from psycopg import Connection

from gpuscope.collector.query.fleet import IDLE_BELOW_PCT

IDLE_FOR = timedelta(minutes=30)  # alerts/default_rules.yaml GpuIdleInJob's `for`
LATEST_WITHIN = timedelta(minutes=5)  # alerts/views.sql gpu_latest: an older sample is no latest one


@dataclass(frozen=True)
class IdleGpu:
    job_id: str
    user: str | None
    node: str
    gpu_index: int
    gpu_id: int
    held_since: datetime  # the job's allocation of the GPU
    # The first idle sample after the job's last busy one on this GPU; None: before the `since_from` asked
    # for (or it was not asked for).
    idle_since: datetime | None


# The running allocations held for IDLE_FOR at least; busy: a sample at or over the threshold. The
# idle run's start is looked for only from `since_from`, when one is given (a one-time filter on it
# skips both lateral reads otherwise).
_SQL = (
    "WITH held AS (SELECT a.job_id, a.username, n.name AS node, g.gpu_index, a.gpu_id, a.started_at"
    "   FROM job_allocation a JOIN gpu g ON g.gpu_id = a.gpu_id JOIN node n ON n.node_id = a.node_id"
    "   WHERE a.ended_at IS NULL AND a.started_at <= now() - %(idle_for)s"
    "   AND (%(node)s::text IS NULL OR n.name = %(node)s)"
    "   AND (%(jobs)s::text[] IS NULL OR a.job_id = ANY(%(jobs)s)))"
    " SELECT h.job_id, h.username, h.node, h.gpu_index, h.gpu_id, h.started_at, busy.ts, first_idle.ts FROM held h"
    " LEFT JOIN LATERAL (SELECT max(b.ts) AS ts FROM gpu_sample b WHERE %(from)s::timestamptz IS NOT NULL"
    "   AND b.gpu_id = h.gpu_id AND b.ts >= greatest(h.started_at, %(from)s) AND b.util_pct >= %(below)s) busy ON true"
    " LEFT JOIN LATERAL (SELECT min(s.ts) AS ts FROM gpu_sample s WHERE %(from)s::timestamptz IS NOT NULL"
    "   AND s.gpu_id = h.gpu_id"
    "   AND s.ts > coalesce(busy.ts, greatest(h.started_at, %(from)s) - interval '1 microsecond')) first_idle ON true"
    " WHERE NOT EXISTS (SELECT 1 FROM gpu_sample s WHERE s.gpu_id = h.gpu_id AND s.ts > now() - %(idle_for)s"
    "   AND s.util_pct >= %(below)s)"
    " AND EXISTS (SELECT 1 FROM gpu_sample s WHERE s.gpu_id = h.gpu_id AND s.ts > now() - %(latest)s"
    "   AND s.util_pct < %(below)s)"
    " ORDER BY h.job_id, h.node, h.gpu_index"
)


def idle_gpus(
    conn: Connection[Any],
    node: str | None = None,
    jobs: Sequence[str] | None = None,
    since_from: datetime | None = None,
) -> list[IdleGpu]:
    """The GPUs held idle now, on `node` or of `jobs` if given (all running jobs otherwise); with
    `since_from`, since when each has been idle, looked for from then on."""
    params = {
        "node": node,
        "jobs": None if jobs is None else list(jobs),
        "from": since_from,
        "idle_for": IDLE_FOR,
        "latest": LATEST_WITHIN,
        "below": IDLE_BELOW_PCT,
    }
    found = []
    for job_id, user, on, index, gpu_id, held_since, busy, first_idle in conn.execute(_SQL, params).fetchall():
        # No busy sample since `since_from`, and held from before it: idle since before then.
        before = since_from is None or (busy is None and held_since < since_from)
        found.append(IdleGpu(job_id, user, on, index, gpu_id, held_since, None if before else first_idle))
    return found
