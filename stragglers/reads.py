"""Stragglers the watch declared (stragglers/watch.py), newest first, each with what it cost, and how the watch
judges each job: the straggler tables' reads, for the read API (stragglers/api.py), /metrics and the dashboard.

What an episode cost: the GPU-hours the job spent beyond what its work would have taken at its normal
pace. A job `slowdown` slower (steps 1 + slowdown times as long) does in D hours what it would have done
in D / (1 + slowdown), so its G GPUs lost G x D x slowdown / (1 + slowdown) GPU-hours (for small
slowdowns about G x D x slowdown). G: the GPUs the job held while the episode lasted.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import Connection, sql

from gpuscope.collector.query.timerange import TimeRange


@dataclass(frozen=True)
class StragglerRow:
    job_id: str
    cluster: str
    rack: str | None  # None (and node None): a finding about the whole job (cause fabric)
    node: str | None
    gpu: int | None  # index on the node; None: the node itself
    uuid: str | None
    nic: str | None  # the port's device (a slow NIC on a node with several), e.g. mlx5_3; None otherwise
    port: int | None
    cause: str
    slowdown: float
    evidence: dict[str, float]
    started_at: datetime
    declared_at: datetime
    ended_at: datetime | None
    gpus: int = 0  # the GPUs the job held during the episode
    user: str | None = None  # the job's owner, where the scheduler said
    gpu_hours_lost: float = 0.0  # see the module's docstring; an active episode: so far
    aggressor_job: str | None = None  # fabric: the job whose traffic on shared nodes slowed this one

    @property
    def whole_job(self) -> bool:
        """A finding about the whole job (the fabric, another job), not about one of its ranks."""
        return self.node is None

    @property
    def culprit(self) -> str:
        return culprit_words(self.node, self.gpu, self.nic, self.port, self.aggressor_job)


def culprit_words(node: str | None, gpu: int | None, nic: str | None, port: int | None, aggressor: str | None) -> str:
    """Where, for people: "node7 GPU 3", "node7 NIC mlx5_3 port 1", "node7", or for a whole job "the
    fabric" / "job 4711's traffic". The watch's log says the same; alerts/views.sql's alerting.stragglers
    writes them in SQL for the rules (tests/stragglers/test_culprit_words.py holds the two together)."""
    if node is None:
        return f"job {aggressor}'s traffic" if aggressor else "the fabric"
    if gpu is not None:
        return f"{node} GPU {gpu}"
    if nic is not None:
        return f"{node} NIC {nic} port {port}"
    return node


# The job's GPUs and owner while episode `s` (on node `n`, or none) lasted: job ids are a cluster's own.
JOB_HELD = sql.SQL(
    "SELECT count(DISTINCT a.gpu_id)::int AS gpus, max(a.username) AS username"
    " FROM job_allocation a JOIN node an ON an.node_id = a.node_id"
    " WHERE a.job_id = s.job_id AND an.cluster = coalesce(s.cluster, n.cluster)"
    "   AND a.started_at <= coalesce(s.ended_at, now()) AND coalesce(a.ended_at, 'infinity') >= s.started_at"
)


def lost_gpu_hours(start: sql.Composable, end: sql.Composable) -> sql.Composed:
    """An episode's cost between two SQL expressions, in GPU-hours (the module's docstring)."""
    return sql.SQL(
        "held.gpus * greatest(0, extract(epoch FROM {end} - {start}))::float8 / 3600"
        " * s.slowdown::float8 / (1 + s.slowdown::float8)"
    ).format(start=start, end=end)


def stragglers(
    conn: Connection[Any], time_range: TimeRange, job: str | None = None, active_only: bool = False, limit: int = 1000
) -> list[StragglerRow]:
    """Stragglers active at some point in the range (still active ones included)."""
    query = sql.SQL(
        "SELECT s.job_id, coalesce(s.cluster, n.cluster), n.rack, n.name, g.gpu_index, g.uuid, p.device, p.port,"
        "       s.cause, s.slowdown::float8, s.evidence, s.started_at, s.declared_at, s.ended_at, held.gpus,"
        "       held.username,"
        "       {lost}, s.aggressor_job"
        " FROM straggler s LEFT JOIN node n ON n.node_id = s.node_id LEFT JOIN gpu g ON g.gpu_id = s.gpu_id"
        " LEFT JOIN ib_port p ON p.port_id = s.port_id"
        " CROSS JOIN LATERAL ({held}) held"
        " WHERE s.started_at < %(end)s AND coalesce(s.ended_at, 'infinity') >= %(start)s"
        "   AND (%(job)s::text IS NULL OR s.job_id = %(job)s) AND (NOT %(active)s OR s.ended_at IS NULL)"
        " ORDER BY s.started_at DESC, s.straggler_id DESC LIMIT %(limit)s"
    ).format(lost=lost_gpu_hours(sql.SQL("s.started_at"), sql.SQL("coalesce(s.ended_at, now())")), held=JOB_HELD)
    rows = conn.execute(
        query, {"start": time_range.start, "end": time_range.end, "job": job, "active": active_only, "limit": limit}
    ).fetchall()
    return [StragglerRow(*row) for row in rows]


@dataclass(frozen=True)
class JudgingModel:
    """How the straggler watch judged a job (stragglers/synchrony.py): "synchronous" (its ranks wait for
    each other: a slow one is a straggler), "independent" (replicas that wait for nobody: not judged) or
    "undecided" (too little healthy running seen yet); `wander` is the measure it went by."""

    model: str
    wander: float | None
    updated_at: datetime

    @property
    def words(self) -> str:
        if self.model == "independent":
            return "not judged: its GPUs follow loads of their own (independent replicas), nobody waits for a slow one"
        if self.model == "undecided":
            return "not judged yet: the detector is still learning how the job runs"
        return "judged as synchronous work: its GPUs wait for each other, so a slow one slows them all"


def judging_model(conn: Connection[Any], job_id: str) -> JudgingModel | None:
    """The latest word of the straggler watch on the job (in whichever cluster ran it last)."""
    row = conn.execute(
        "SELECT model, wander::float8, updated_at FROM straggler_job_model WHERE job_id = %s"
        " ORDER BY updated_at DESC LIMIT 1",
        (job_id,),
    ).fetchone()
    return JudgingModel(*row) if row else None
