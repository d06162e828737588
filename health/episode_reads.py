"""Health episodes as the health loop records them (health/episodes.py, table health_episode): each time a
node left healthy, what it cost (how long its GPUs were out), which repair the escalation ladder chose,
and what followed (did the same node, or the same GPU, fail again within 7 and 30 days); and per cause and
repair, how often a repair held. Sync reads for the health API (health/api.py) and the dashboard.

A failure is an episode that took its node (or GPU) out of service (out_at set), held it for inspection
(outcome 'held'), or got a repair from the escalation ladder (rung set: taken out, or in a dry run would
have been; the failures the ladder itself counts, health/episodes.py); a suspect finding that cleared by
itself is not one. A failure again is a later failure of the same node (for a GPU-scoped episode: of the
same GPU). It is read from the episodes that followed, one statement per read, never stored."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import psycopg

from gpuscope.collector.query.timerange import TimeRange
from gpuscope.health.reads import ActionRow, EvidenceRow

EPISODE_EVIDENCE_SHOWN = 500  # an episode's newest findings; a week-long link flap can have thousands


def _failure(alias: str) -> str:
    """Whether the episode `alias` is a failure (see above), in SQL."""
    return f"({alias}.out_at IS NOT NULL OR {alias}.rung IS NOT NULL OR {alias}.outcome = 'held')"


# The first later episode that counts as a failure again of episode `e` (its node, or its GPU when only the
# GPU was taken out): one index range scan per episode (health_episode_node).
_FAILED_AGAIN = (
    "SELECT x.episode_id, x.started_at FROM health_episode x"  # noqa: S608 (constants)
    " WHERE x.node_id = e.node_id AND x.episode_id <> e.episode_id AND x.started_at >= e.back_at"
    "   AND (e.scope <> 'gpu' OR e.gpu_id IS NULL OR x.gpu_id = e.gpu_id)"
    f"   AND {_failure('x')}"
    " ORDER BY x.started_at, x.episode_id LIMIT 1"
)


@dataclass(frozen=True)
class EpisodeRow:
    episode_id: int
    cluster: str
    node: str
    gpu: int | None  # the index of the GPU the worst finding names; None: the node as a whole
    gpu_uuid: str | None
    scope: str  # node | gpu (one device taken out)
    cause: str  # 'xid:79', 'ecc_uncorrectable', 'recovery_action:2', ...
    cause_detail: str
    started_at: datetime
    out_at: datetime | None  # None: never taken out of service
    back_at: datetime | None  # None: still open
    outcome: str  # open | cleared | returned | resumed_by_operator | held
    gpus_out: int
    out_s: float | None  # from out_at to back_at (or now, while out); None: never taken out
    gpu_hours: float  # GPU-hours out of the fleet: gpus_out * out_s / 3600 (0 when never taken out)
    rung: int | None
    repair: str | None  # reset_gpu | reboot_node | inspect; None: no repair chosen
    repair_reason: str | None
    repair_result: str | None
    validation: str | None
    failed_test: str | None
    dry_run: bool
    # Whether the same node (resp. GPU) failed again within 7 / 30 days of back_at. None: not known yet:
    # the episode is open, or the window has not passed and nothing failed so far.
    failed_again_7d: bool | None
    failed_again_30d: bool | None
    next_episode_id: int | None  # the failure again that followed, however much later; None: none (yet)


@dataclass(frozen=True)
class EpisodeRecord:
    """One episode with what happened on its node during it (from started_at to back_at, or now)."""

    episode: EpisodeRow
    evidence: list[EvidenceRow]  # newest first, at most EPISODE_EVIDENCE_SHOWN
    evidence_count: int  # all of them
    actions: list[ActionRow]  # newest first


@dataclass(frozen=True)
class RepairOutcome:
    """Failures (see above) of one cause and repair that ended in the range (the node, or GPU, back in
    service: returned, resumed by an operator, or in a dry run healthy again), and whether the repair
    held: `held_7d` did not fail again within 7 days, and 7 days have passed; `failed_7d` did;
    `too_early_7d` neither yet. The same over 30 days. A rate is held / (held + failed); None: no verdict
    yet. ("Held" here is the repair holding, not an operator's hold or outcome 'held'.)"""

    cause: str
    repair: str | None  # None: no repair chosen
    returned: int
    held_7d: int
    failed_7d: int
    too_early_7d: int
    held_30d: int
    failed_30d: int
    too_early_30d: int

    @property
    def held_rate_7d(self) -> float | None:
        return _rate(self.held_7d, self.failed_7d)

    @property
    def held_rate_30d(self) -> float | None:
        return _rate(self.held_30d, self.failed_30d)


def _rate(held: int, failed: int) -> float | None:
    return held / (held + failed) if held + failed else None


_EPISODE_COLUMNS = (
    "SELECT e.episode_id, n.cluster, n.name, g.gpu_index, g.uuid, e.scope, e.cause, e.cause_detail,"  # noqa: S608 (constants)
    "  e.started_at, e.out_at, e.back_at, e.outcome, e.gpus_out,"
    "  extract(epoch FROM coalesce(e.back_at, x.now) - e.out_at)::float8,"
    "  e.rung, e.repair, e.repair_reason, e.repair_result, e.validation, e.failed_test, e.dry_run,"
    "  CASE WHEN e.back_at IS NULL THEN NULL WHEN f.started_at < e.back_at + interval '7 days' THEN true"
    "       WHEN e.back_at + interval '7 days' <= x.now THEN false END,"
    "  CASE WHEN e.back_at IS NULL THEN NULL WHEN f.started_at < e.back_at + interval '30 days' THEN true"
    "       WHEN e.back_at + interval '30 days' <= x.now THEN false END,"
    "  f.episode_id"
    " FROM health_episode e CROSS JOIN (SELECT coalesce(%(now)s::timestamptz, now()) AS now) x"
    " JOIN node n ON n.node_id = e.node_id LEFT JOIN gpu g ON g.gpu_id = e.gpu_id"
    f" LEFT JOIN LATERAL ({_FAILED_AGAIN}) f ON true"
)


_READ = [f.name for f in fields(EpisodeRow) if f.name != "gpu_hours"]  # _EPISODE_COLUMNS, in order


def _episode(row: tuple[Any, ...]) -> EpisodeRow:
    read = dict(zip(_READ, row, strict=True))
    out_s = read["out_s"]
    return EpisodeRow(**read, gpu_hours=read["gpus_out"] * out_s / 3600 if out_s is not None else 0.0)


def episodes(
    conn: psycopg.Connection[Any],
    span: TimeRange,
    cluster: str | None = None,
    node: str | None = None,
    gpu_uuid: str | None = None,
    limit: int = 10_000,
    now: datetime | None = None,
) -> list[EpisodeRow]:
    """The episodes that overlap `span` (started before its end, still open or back after its start), the
    newest first; of `cluster`, of nodes named `node`, of the GPU `gpu_uuid`. `now` (default the
    database's): the end of an open episode, and the moment the 7 and 30 day windows are judged at."""
    rows = conn.execute(
        _EPISODE_COLUMNS + " WHERE e.started_at < %(end)s AND (e.back_at IS NULL OR e.back_at >= %(start)s)"
        "  AND (%(cluster)s::text IS NULL OR n.cluster = %(cluster)s)"
        "  AND (%(node)s::text IS NULL OR n.name = %(node)s)"
        "  AND (%(uuid)s::text IS NULL OR g.uuid = %(uuid)s)"
        " ORDER BY e.started_at DESC, e.episode_id DESC LIMIT %(limit)s",
        {"now": now, "start": span.start, "end": span.end, "cluster": cluster, "node": node, "uuid": gpu_uuid,
         "limit": limit},
    ).fetchall()  # fmt: skip
    return [_episode(row) for row in rows]


def episode(conn: psycopg.Connection[Any], episode_id: int, now: datetime | None = None) -> EpisodeRecord | None:
    """One episode with its node's findings and scheduler actions from its start to its end (or now);
    None where no episode has this id."""
    row = conn.execute(_EPISODE_COLUMNS + " WHERE e.episode_id = %(id)s", {"now": now, "id": episode_id}).fetchone()
    if row is None:
        return None
    found = _episode(row)
    span = {"id": episode_id, "now": now, "shown": EPISODE_EVIDENCE_SHOWN}
    evidence = conn.execute(
        "SELECT f.at, f.kind, g.gpu_index, f.code, f.severity, f.action, f.detail, count(*) OVER ()"
        " FROM health_episode e JOIN health_evidence f ON f.node_id = e.node_id"
        "  AND f.at BETWEEN e.started_at AND coalesce(e.back_at, %(now)s::timestamptz, now())"
        " LEFT JOIN gpu g ON g.gpu_id = f.gpu_id"
        " WHERE e.episode_id = %(id)s ORDER BY f.at DESC, f.evidence_id DESC LIMIT %(shown)s",
        span,
    ).fetchall()
    actions = conn.execute(
        "SELECT a.at, n.cluster, n.name, a.action, a.scheduler, a.dry_run, a.ok, a.detail"
        " FROM health_episode e JOIN health_action a ON a.node_id = e.node_id"
        "  AND a.at BETWEEN e.started_at AND coalesce(e.back_at, %(now)s::timestamptz, now())"
        " JOIN node n ON n.node_id = e.node_id"
        " WHERE e.episode_id = %(id)s ORDER BY a.at DESC, a.action_id DESC",
        span,
    ).fetchall()
    count = evidence[0][-1] if evidence else 0
    return EpisodeRecord(found, [EvidenceRow(*r[:-1]) for r in evidence], count, [ActionRow(*r) for r in actions])


def repair_outcomes(
    conn: psycopg.Connection[Any], span: TimeRange, cluster: str | None = None, now: datetime | None = None
) -> list[RepairOutcome]:
    """Per cause and repair, the failures that ended (back_at) in `span`, and whether the repair held 7
    and 30 days; the most returned first. `now` (default the database's): the moment the windows are
    judged at."""
    rows = conn.execute(
        "WITH back AS ("  # noqa: S608 (constants)
        "  SELECT e.cause, e.repair, e.back_at, f.started_at AS again, x.now"
        "  FROM health_episode e CROSS JOIN (SELECT coalesce(%(now)s::timestamptz, now()) AS now) x"
        "  JOIN node n ON n.node_id = e.node_id"
        f"  LEFT JOIN LATERAL ({_FAILED_AGAIN}) f ON true"
        f"  WHERE {_failure('e')} AND e.back_at >= %(start)s AND e.back_at < %(end)s"
        "    AND (%(cluster)s::text IS NULL OR n.cluster = %(cluster)s)),"
        " judged AS ("
        "  SELECT cause, repair,"
        "    CASE WHEN again < back_at + interval '7 days' THEN 'failed'"
        "         WHEN back_at + interval '7 days' <= now THEN 'held' ELSE 'early' END AS week,"
        "    CASE WHEN again < back_at + interval '30 days' THEN 'failed'"
        "         WHEN back_at + interval '30 days' <= now THEN 'held' ELSE 'early' END AS month"
        "  FROM back)"
        " SELECT cause, repair, count(*),"
        "   count(*) FILTER (WHERE week = 'held'), count(*) FILTER (WHERE week = 'failed'),"
        "   count(*) FILTER (WHERE week = 'early'),"
        "   count(*) FILTER (WHERE month = 'held'), count(*) FILTER (WHERE month = 'failed'),"
        "   count(*) FILTER (WHERE month = 'early')"
        " FROM judged GROUP BY cause, repair ORDER BY count(*) DESC, cause, repair NULLS FIRST",
        {"now": now, "start": span.start, "end": span.end, "cluster": cluster},
    ).fetchall()
    return [RepairOutcome(*row) for row in rows]
