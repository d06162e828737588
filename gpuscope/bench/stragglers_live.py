"""Straggler detection end to end, in real time: simulated training jobs pushed through the ingest API
into a real collector (embedded PostgreSQL, the straggler watch as in production), scored from what
GET /api/v1/stragglers shows and when.

Each job has 15 minutes of history (pushed at once, as exporters catching up would), then runs live:
every node pushes its 5 s samples every 10 s, as the exporter does by default (`push_s`: sites push
every 10-60 s). Faults start one minute into the live part, so the latency from onset to "visible in
the API" includes everything a user waits for: the exporter's push interval, the watch waiting for a
job's slowest node, its cycle, the detector's persistence.
"""

from __future__ import annotations

import secrets
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from gpuscope.collector.service import BackgroundServer
from gpuscope.collector_process import CollectorSettings, build
from gpuscope.core.embedded_pg import throwaway_postgres
from gpuscope.core.ingest_wire import BINARY_CONTENT_TYPE
from gpuscope.exporter.sim.training import FAULT_KINDS, Fault, Telemetry, TrainingJob, simulate
from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, JobInfo, PortIdentity, PortReading, Snapshot
from gpuscope.exporter.wire import Origin, encode_binary

HISTORY_S = 900.0
ONSET_AFTER_S = 60.0  # into the live part
WATCH_S = 180.0  # live time after the onset before the score is taken
SAMPLE_S = 5.0
SEVERITIES = (0.1, 0.2, 0.5)


@dataclass
class LiveJob:
    job_id: str
    job: TrainingJob
    fault: Fault | None
    telemetry: Telemetry
    sent: int = 0  # samples pushed so far
    seq: dict[int, int] = field(default_factory=dict)  # node -> last batch sequence number
    exporters: dict[int, str] = field(default_factory=dict)  # node -> exporter id


def scenarios(seed: int = 7) -> list[LiveJob]:
    """Every fault kind at each severity on its own job, and two clean jobs."""
    rng = np.random.default_rng(seed)
    duration = HISTORY_S + ONSET_AFTER_S + WATCH_S + 60
    jobs = []
    plan: list[tuple[str | None, float]] = [(k, s) for k in FAULT_KINDS for s in SEVERITIES] + [(None, 0.0)] * 2
    for n, (kind, severity) in enumerate(plan):
        job = TrainingJob(
            nodes=int(rng.integers(2, 5)),
            gpus_per_node=8,
            step_s=float(rng.uniform(0.6, 2.5)),
            comm_fraction=float(rng.uniform(0.15, 0.35)),
            checkpoint_every_s=3 * 3600,
            seed=seed * 100 + n,
        )
        fault = None
        if kind is not None:
            fault = Fault(
                kind,
                node=int(rng.integers(job.nodes)),
                gpu=int(rng.integers(job.gpus_per_node)) if kind in ("thermal", "power_cap") else None,
                onset_s=HISTORY_S + ONSET_AFTER_S,
                end_s=duration + 3600,
                severity=severity,
            )
        telemetry = simulate(job, [fault] if fault else [], duration, SAMPLE_S)
        jobs.append(LiveJob(f"live-{n:02d}-{kind or 'clean'}-{int(100 * severity)}", job, fault, telemetry))
    return jobs


def push_due(client: httpx.Client, url: str, token: str, job: LiveJob, started: float, now: float) -> None:
    """Push the job's samples whose time has come, one batch per node, as its exporters would."""
    due = int(np.searchsorted(job.telemetry.times, now - started, side="right"))
    if due <= job.sent:
        return
    per_node = job.job.gpus_per_node
    for node in range(job.job.nodes):
        name = f"{job.job_id}-n{node}"
        exporter = job.exporters.setdefault(node, str(uuid.uuid4()))
        gpus = [GpuIdentity(i, f"GPU-{name}-{i}", "H100", f"00:{i:02x}") for i in range(per_node)]
        snapshots = []
        for i in range(job.sent, due):
            readings = []
            for identity in gpus:
                rank = node * per_node + identity.index
                values = {k: float(v[rank, i]) for k, v in job.telemetry.gpu.items() if np.isfinite(v[rank, i])}
                readings.append(GpuReading(identity, True, values=values))
            nic = {k: float(v[node, i]) for k, v in job.telemetry.nic.items()}
            port = PortReading(PortIdentity("mlx5_0", 1), nic)
            jobs = {g.index: JobInfo(job.job_id, "bench") for g in gpus}
            snapshots.append(
                Snapshot(ts=started + float(job.telemetry.times[i]), gpus=tuple(readings), ports=(port,), jobs=jobs)
            )
        for lo in range(0, len(snapshots), 120):
            job.seq[node] = job.seq.get(node, 0) + 1
            body = encode_binary(
                Origin("bench", f"rack-{node}", name, "sim", exporter), job.seq[node], snapshots[lo : lo + 120]
            )
            response = client.post(
                f"{url}/api/v1/samples",
                content=body,
                headers={"Authorization": f"Bearer {token}", "Content-Type": BINARY_CONTENT_TYPE},
            )
            response.raise_for_status()
    job.sent = due


def run(push_s: float = 10.0) -> dict[str, Any]:
    jobs = scenarios()
    token = secrets.token_urlsafe(24)
    with throwaway_postgres("gpuscope-bench-live-") as pg, tempfile.TemporaryDirectory() as tmp:
        settings = CollectorSettings(listen="127.0.0.1:0", data_dir=Path(tmp), alerts=False)
        server = BackgroundServer(build(settings, pg.dsn, token), "127.0.0.1", 0)
        server.start()
        url = f"http://127.0.0.1:{server.port}"
        # job -> (wall time it was first visible, its row as last seen: the slowdown estimate grows firmer)
        seen: dict[str, tuple[float, dict[str, Any]]] = {}
        try:
            with httpx.Client(timeout=30) as client:
                started = time.time() - HISTORY_S
                onset_wall = started + HISTORY_S + ONSET_AFTER_S
                for job in jobs:
                    push_due(client, url, token, job, started, time.time())
                next_push = time.time() + push_s
                while time.time() < onset_wall + WATCH_S:
                    if time.time() >= next_push:
                        for job in jobs:
                            push_due(client, url, token, job, started, time.time())
                        next_push += push_s
                    rows = client.get(f"{url}/api/v1/stragglers", params={"minutes": 60}).json()
                    for row in rows:
                        seen[row["job_id"]] = (seen.get(row["job_id"], (time.time(), row))[0], row)
                    time.sleep(1.0)
        finally:
            server.stop()
    return _score(jobs, seen, onset_wall) | {"push_s": push_s}


def _score(jobs: list[LiveJob], seen: dict[str, tuple[float, dict[str, Any]]], onset_wall: float) -> dict[str, Any]:
    latencies, errors, right, found = [], [], 0, {s: [0, 0] for s in SEVERITIES}
    # From the detector's declaration (the time of the sample that completed its persistence) to the
    # row in the API: the watch waiting for the job's slowest node, its cycle, the exporters' pushes.
    lags = [at - datetime.fromisoformat(row["declared_at"]).timestamp() for at, row in seen.values()]
    false_alarms = sum(1 for job in jobs if job.fault is None and job.job_id in seen)
    for job in jobs:
        if job.fault is None:
            continue
        found[job.fault.severity][1] += 1
        if job.job_id not in seen:
            continue
        at, row = seen[job.job_id]
        node = int(row["node"].rsplit("-n", 1)[1])
        if (node, row["gpu"], row["cause"]) != (job.fault.node, job.fault.gpu, job.fault.kind):
            continue
        right += 1
        found[job.fault.severity][0] += 1
        if job.fault.severity >= 0.2:
            latencies.append(at - onset_wall)
        errors.append(abs(row["slowdown"] - job.fault.severity) / job.fault.severity)
    declared = len([j for j in jobs if j.job_id in seen])
    return {
        "jobs": len(jobs),
        "gpus": sum(j.job.ranks for j in jobs),
        "precision": round(right / max(1, declared), 3),
        **{f"recall_{int(100 * s)}pct": round(d / max(1, n), 3) for s, (d, n) in found.items()},
        "onset_to_api_p50_s": round(statistics.median(latencies), 1) if latencies else None,
        "onset_to_api_max_s": round(max(latencies), 1) if latencies else None,
        "declared_to_api_p50_s": round(statistics.median(lags), 1) if lags else None,
        "declared_to_api_max_s": round(max(lags), 1) if lags else None,
        "slowdown_error_median": round(statistics.median(errors), 3) if errors else None,
        "false_alarms_clean_jobs": false_alarms,
        "sample_s": SAMPLE_S,
    }
