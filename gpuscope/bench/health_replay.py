"""A health policy replayed over 30 days of a 10,000-GPU fleet's stored evidence (health/replay.py), the
question `gpuscope health replay` answers before a site switches a policy on.

The month is made to be harder than a real one (seeded, so every run replays the same month):
- every node: application XIDs the catalogue ignores (stored, never read by a replay), and a few suspect
  findings (thermal slowdown, link flaps) that mostly clear;
- 2% of nodes flap their InfiniBand links for a day, enough suspect findings to go unhealthy;
- about 1% of GPUs fail for real (XID 79, 48, 94/95, a lost GPU), and a dozen bad nodes fail five times
  in ten days (the ladder climbs to inspection);
- jobs on every node, back to back, 1 to 48 h each, some protected by the candidate policy;
- the live policy's own record (drains, refusals, time out) for the side-by-side answer.
Timed: reading the history and replaying the candidate policy, twice (the answers must be equal)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg
from psycopg import conninfo

from gpuscope.bench.fleet_db import create_fleet
from gpuscope.collector.store.migrate import migrate
from gpuscope.health.policy import HealthPolicy
from gpuscope.health.replay import replay
from gpuscope.health.replay_data import load_history

GPUS_PER_NODE = 8
DAYS = 30
CANDIDATE = HealthPolicy(max_drained=20, max_drained_share=0.05, max_drains_per_hour=6, protect_jobs=("^hero-",),
                         quiet_s=1800)  # fmt: skip
# (kind, code, severity, action, detail): the real failures, and what the catalogue asks of each.
FAILURES = [
    ("xid", 79, "unhealthy", "reboot_node", "XID 79 (GPU has fallen off the bus)"),
    ("xid", 48, "unhealthy", "reset_gpu", "XID 48 (double-bit ECC error)"),
    ("xid", 94, "unhealthy", "reset_gpu", "XID 94 (contained ECC error)"),
    ("xid", 95, "unhealthy", "reset_gpu", "XID 95 (uncontained ECC error)"),
    ("gpu_lost", None, "unhealthy", "reboot_node", "GPU lost"),
]
SUSPECTS = [
    ("thermal_slowdown", None, "suspect", "check_cooling", "thermal slowdown"),
    ("nvlink_flap", None, "suspect", "check_link", "NVLink recoveries"),
    ("ib_flap", None, "suspect", "check_link", "InfiniBand port flapping"),
]


def measure(admin_dsn: str, nodes: int = 1250, seed: int = 41) -> dict[str, Any]:
    """Loads the month into a new database beside `admin_dsn`'s, then times the replay."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute("CREATE DATABASE gpuscope_replay")
    dsn = conninfo.make_conninfo(admin_dsn, dbname="gpuscope_replay")
    migrate(dsn)
    end = datetime(2026, 11, 1, tzinfo=UTC)
    start = end - timedelta(days=DAYS)
    t0 = time.perf_counter()
    rows = _load(dsn, nodes, start, seed)
    load_s = time.perf_counter() - t0
    answers, timings = [], []
    with psycopg.connect(dsn) as conn:
        for _ in range(2):
            t0 = time.perf_counter()
            history = load_history(conn, start, end, timedelta(seconds=max(CANDIDATE.suspect_window_s,
                                                                           CANDIDATE.ladder_window_s)))  # fmt: skip
            read_s = time.perf_counter() - t0
            answer = replay(CANDIDATE, history, start, end).as_json()
            timings.append((time.perf_counter() - t0, read_s))
            answers.append(json.dumps(answer, sort_keys=True))
    answer = json.loads(answers[0])
    best = min(timings)
    return {
        "replay_gpus": nodes * GPUS_PER_NODE,
        "replay_days": DAYS,
        "replay_rows_loaded": rows,
        "replay_load_seconds": round(load_s, 1),
        "replay_s": round(best[0], 3),
        "replay_read_s": round(best[1], 3),
        "replay_findings": answer["findings"],
        "replay_deterministic": answers[0] == answers[1],
        "replay_candidate": _summary(answer["candidate"]),
        "replay_live": _summary(answer["live"]),
    }


def _summary(side: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in side.items() if not k.endswith("_list")}


def _load(dsn: str, nodes: int, start: datetime, seed: int) -> int:
    rng = np.random.default_rng(seed)
    gpus = nodes * GPUS_PER_NODE
    month = DAYS * 86400
    evidence: list[tuple[Any, ...]] = []

    def add(node: int, gpu: int | None, t: float, what: tuple[Any, ...]) -> None:
        kind, code, severity, action, detail = what
        where = "" if gpu is None else f" on GPU {gpu % GPUS_PER_NODE}"
        evidence.append((start + timedelta(seconds=float(t)), node + 1, None if gpu is None else gpu + 1, kind, code,
                         severity, action, detail + where))  # fmt: skip

    for gpu in rng.choice(gpus, size=gpus * 4):  # application XIDs: ignored by every policy
        add(int(gpu) // GPUS_PER_NODE, int(gpu), rng.uniform(0, month), ("xid", 13, "ignore", "none", "XID 13"))
    for node in range(nodes):  # a few suspect findings a month per node
        for _ in range(rng.poisson(3)):
            add(node, None, rng.uniform(0, month), SUSPECTS[rng.integers(len(SUSPECTS))])
    for node in rng.choice(nodes, size=max(1, nodes // 50), replace=False):  # a day of flapping links
        day = rng.uniform(0, month - 86400)
        for t in np.sort(rng.uniform(day, day + 86400, size=8)):
            add(int(node), None, t, SUSPECTS[2])
    for gpu in rng.choice(gpus, size=max(1, gpus // 100), replace=False):  # real failures
        add(int(gpu) // GPUS_PER_NODE, int(gpu), rng.uniform(0, month), FAILURES[rng.integers(len(FAILURES))])
    for node in rng.choice(nodes, size=min(12, nodes), replace=False):  # repeat offenders
        gpu = int(node) * GPUS_PER_NODE + int(rng.integers(GPUS_PER_NODE))
        failure = FAILURES[rng.integers(len(FAILURES))]
        first = rng.uniform(0, month - 10 * 86400)
        for t in np.sort(rng.uniform(first, first + 10 * 86400, size=5)):  # five in ten days
            add(int(node), gpu, t, failure)
    jobs = _jobs(rng, nodes, start, month)
    with psycopg.connect(dsn) as conn:
        create_fleet(conn, nodes, GPUS_PER_NODE, 0)
        with conn.cursor() as cur:
            with cur.copy("COPY health_evidence (at, node_id, gpu_id, kind, code, severity, action, detail)"
                          " FROM STDIN") as copy:  # fmt: skip
                for row in evidence:
                    copy.write_row(row)
            with cur.copy("COPY job_allocation (job_id, username, node_id, gpu_id, started_at, last_seen, ended_at)"
                          " FROM STDIN") as copy:  # fmt: skip
                for row in jobs:
                    copy.write_row(row)
        _live_record(conn, rng, nodes, start, month)
        conn.commit()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return len(evidence) + len(jobs)


def _jobs(rng: np.random.Generator, nodes: int, start: datetime, month: int) -> list[tuple[Any, ...]]:
    """Back-to-back jobs on every node, each on all its GPUs; one in twenty a protected hero run."""
    rows = []
    serial = 0
    for node in range(nodes):
        t = -rng.uniform(0, 86400)
        while t < month:
            length = rng.uniform(3600, 48 * 3600)
            serial += 1
            job = f"{'hero' if serial % 20 == 0 else 'job'}-{serial}"
            begin, finish = start + timedelta(seconds=t), start + timedelta(seconds=t + length)
            for g in range(GPUS_PER_NODE):
                rows.append((job, f"user{serial % 97}", node + 1, node * GPUS_PER_NODE + g + 1, begin, finish, finish))
            t += length + rng.uniform(0, 1800)
    return rows


def _live_record(
    conn: psycopg.Connection[Any], rng: np.random.Generator, nodes: int, start: datetime, month: int
) -> None:
    """The live policy's month: 80 drains, each out for 1 to 12 h, and 20 refusals."""
    for i in range(80):
        node = int(rng.integers(nodes)) + 1
        at = start + timedelta(seconds=float(rng.uniform(0, month - 86400)))
        back = at + timedelta(hours=float(rng.uniform(1, 12)))
        conn.execute(
            "INSERT INTO health_action (at, node_id, action, scheduler, dry_run, ok, detail)"
            " VALUES (%s, %s, 'drain', 'slurm', false, true, 'scontrol update ...')",
            [at, node],
        )
        conn.execute(
            "INSERT INTO health_transition (at, node_id, from_state, to_state, reason, actor) VALUES"
            " (%s, %s, 'unhealthy', 'drained', 'bench', 'gpuscope'),"
            " (%s, %s, 'validating', 'healthy', 'bench', 'gpuscope')",
            [at, node, back, node],
        )
        if i % 4 == 0:
            conn.execute(
                "INSERT INTO health_action (at, node_id, action, scheduler, dry_run, ok, detail)"
                " VALUES (%s, %s, 'refused', 'slurm', false, NULL, %s)",
                [at, node % nodes + 1, "drain refused: 4 drains in the last hour, the policy allows 4"],
            )
