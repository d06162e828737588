"""What a replay reads (health/replay.py): the stored findings of the window, the nodes and their GPU
counts, the jobs that ran, the ladder's earlier failures, and what the live policy did over the same
window. Read only, a few statements, no per-node queries: a month of a 10,000-GPU fleet is one pass."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from gpuscope.health.decide import guard_rail
from gpuscope.health.episodes import CODED_KINDS

EARLIEST = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Finding:
    at: datetime
    node_id: int
    severity: str  # suspect | unhealthy (findings that are ignored move nothing and are not read)
    cause: str
    action: str
    detail: str


@dataclass(frozen=True)
class Node:
    cluster: str
    name: str
    gpus: int


@dataclass(frozen=True)
class Job:
    job_id: str
    user: str | None
    start: datetime
    end: datetime | None  # None: still running


@dataclass
class LiveRecord:
    """What the live policy did in the window, from its audit trail."""

    drains: int = 0
    dry_run_drains: int = 0
    refusals: dict[str, int] = field(default_factory=dict)
    out_spans: list[tuple[int, datetime, datetime | None]] = field(default_factory=list)  # node, drained, back
    drained_at: list[tuple[int, datetime]] = field(default_factory=list)
    repairs: dict[str, int] = field(default_factory=dict)
    held_for_inspection: int = 0
    gpus_out: dict[tuple[int, datetime], int] = field(default_factory=dict)  # (node, drained) -> GPUs out


@dataclass(frozen=True)
class History:
    findings: list[Finding]
    nodes: dict[int, Node]
    jobs: dict[int, list[Job]]
    earlier_failures: list[tuple[int, str, datetime]]  # node, cause, started: episodes before the window
    live: LiveRecord

    def running(self, node_id: int, at: datetime) -> list[Job]:
        """The node's jobs running at `at`: started by then, not yet ended."""
        return [j for j in self.jobs.get(node_id, []) if j.start <= at and (j.end is None or j.end > at)]


def load_history(conn: psycopg.Connection[Any], start: datetime, end: datetime, lookback: timedelta) -> History:
    """The window's history; `lookback`: how far before `start` findings still count (the suspect window)
    and earlier failures still climb the ladder."""
    coded = list(CODED_KINDS)
    since = max(start, EARLIEST + lookback) - lookback  # a window near year 1 must not overflow
    findings = [
        Finding(at, node_id, severity, cause, action, detail)
        for at, node_id, severity, cause, action, detail in conn.execute(
            "SELECT at, node_id, severity,"
            "       CASE WHEN kind = ANY(%s) AND code IS NOT NULL THEN kind || ':' || code ELSE kind END,"
            "       action, detail"
            " FROM health_evidence WHERE at >= %s AND at < %s AND severity <> 'ignore'"
            " ORDER BY at, node_id, kind, code, gpu_id NULLS FIRST",
            [coded, since, end],
        )
    ]
    nodes = {
        node_id: Node(cluster, name, gpus)
        for node_id, cluster, name, gpus in conn.execute(
            "SELECT n.node_id, n.cluster, n.name, (SELECT count(*) FROM gpu g WHERE g.node_id = n.node_id)"
            " FROM node n ORDER BY n.node_id"
        )
    }
    jobs: dict[int, list[Job]] = {}
    for node_id, job_id, user, started, ended in conn.execute(
        "SELECT node_id, job_id, min(username), min(started_at),"
        "       CASE WHEN bool_or(ended_at IS NULL) THEN NULL ELSE max(ended_at) END"  # running on one GPU: running
        " FROM job_allocation WHERE started_at <= %s AND (ended_at IS NULL OR ended_at > %s)"
        " GROUP BY node_id, job_id ORDER BY node_id, min(started_at), job_id",
        [end, since],
    ):
        jobs.setdefault(node_id, []).append(Job(job_id, user, started, ended))
    earlier = [
        (node_id, cause, started)
        for node_id, cause, started in conn.execute(
            "SELECT node_id, cause, started_at FROM health_episode"
            " WHERE rung IS NOT NULL AND started_at >= %s AND started_at < %s ORDER BY started_at, node_id",
            [since, start],
        )
    ]
    return History(findings, nodes, jobs, earlier, _live(conn, start, end))


def _live(conn: psycopg.Connection[Any], start: datetime, end: datetime) -> LiveRecord:
    live = LiveRecord()
    said: dict[int, str] = {}  # node -> the rail that last refused it: counted once per rail, as a replay does
    for node_id, at, action, dry_run, ok, detail in conn.execute(
        "SELECT node_id, at, action, dry_run, ok, detail FROM health_action"
        " WHERE at >= %s AND at < %s AND action IN ('drain', 'refused') ORDER BY at, action_id",
        [start, end],
    ):
        if action == "refused":
            rail = guard_rail(detail)
            if said.get(node_id) != rail:
                said[node_id] = rail
                live.refusals[rail] = live.refusals.get(rail, 0) + 1
            continue
        said.pop(node_id, None)
        if dry_run:
            live.dry_run_drains += 1
            live.drained_at.append((node_id, at))
        elif ok:
            live.drains += 1
            live.drained_at.append((node_id, at))
    # The episodes say which repair, whether held, and how many GPUs were out (one, for a device taint).
    for node_id, out_at, repair, held, gpus in conn.execute(
        "SELECT node_id, out_at, repair, held_at IS NOT NULL, gpus_out FROM health_episode"
        " WHERE out_at >= %s AND out_at < %s AND NOT dry_run ORDER BY out_at, node_id",
        [start, end],
    ):
        if repair is not None:
            live.repairs[repair] = live.repairs.get(repair, 0) + 1
        live.held_for_inspection += bool(held)
        live.gpus_out[(node_id, out_at)] = gpus
    # Time out of service: from each move into drained to the node's next move back to healthy.
    for node_id, drained, back in conn.execute(
        "SELECT t.node_id, t.at, (SELECT min(b.at) FROM health_transition b"
        "                         WHERE b.node_id = t.node_id AND b.at > t.at AND b.to_state = 'healthy')"
        " FROM health_transition t"
        " WHERE t.to_state = 'drained' AND t.from_state <> 'validating' AND t.at < %s"
        "   AND NOT EXISTS (SELECT FROM health_transition b WHERE b.node_id = t.node_id AND b.to_state = 'healthy'"
        "                   AND b.at > t.at AND b.at < %s)"
        " ORDER BY t.at, t.node_id",
        [end, start],
    ):
        live.out_spans.append((node_id, drained, back))
    return live
