"""The straggler watch end to end: a simulated training job pushed through a real collector (format v2,
with job attribution and InfiniBand ports), the watch run over the database, and the straggler stored
with the right job, GPU, cause and interval; nothing for a clean job, nothing twice."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta

import httpx
import psycopg
import pytest

from gpuscope.exporter.sim.training import Fault, TrainingJob, simulate
from gpuscope.stragglers.watch import StragglerWatch, _done
from tests.processes import RunningCollector
from tests.stragglers.helpers import HISTORY_S, JOB, between, push, watch

FAULT = Fault("thermal", 1, 2, onset_s=1500.0, end_s=2100.0, severity=0.2)


@pytest.fixture
def pushed(collector: RunningCollector) -> datetime:
    start = time.time() - HISTORY_S - 20
    push(collector, simulate(JOB, [FAULT], HISTORY_S), start, "train-1")
    clean = TrainingJob(nodes=2, gpus_per_node=4, seed=9)
    push(collector, simulate(clean, [], HISTORY_S), start, "clean-1")
    return datetime.fromtimestamp(start + HISTORY_S + 20, UTC)


def test_straggler_is_found_stored_and_ended(
    collector: RunningCollector, pushed: datetime, caplog: pytest.LogCaptureFixture
) -> None:
    watcher = StragglerWatch()
    with caplog.at_level(logging.WARNING, "gpuscope.stragglers.watch"):
        watch(collector.dsn, watcher, pushed)
    # The log names the culprit as the pages do, not by the store's ids ("node 12 gpu 2 port None").
    assert "straggler in job train-1: train-1-n1 GPU 2, thermal, job " in caplog.text
    with psycopg.connect(collector.dsn) as conn:
        rows = conn.execute(
            "SELECT s.job_id, g.uuid, s.cause, s.slowdown, s.started_at, s.declared_at, s.ended_at"
            " FROM straggler s LEFT JOIN gpu g USING (gpu_id)"
        ).fetchall()
    [(job_id, gpu_uuid, cause, slowdown, started, declared, ended)] = rows
    assert (job_id, gpu_uuid, cause) == ("train-1", "GPU-train-1-1-2", "thermal")
    onset = pushed - timedelta(seconds=20 + HISTORY_S - FAULT.onset_s)
    end = pushed - timedelta(seconds=20 + HISTORY_S - FAULT.end_s)
    assert onset - timedelta(seconds=10) <= started <= declared <= onset + timedelta(seconds=90)
    assert ended is not None and end <= ended <= end + timedelta(seconds=120)
    assert slowdown == pytest.approx(0.2, abs=0.05)
    # A later cycle with nothing new writes nothing twice.
    watch(collector.dsn, watcher, pushed + timedelta(seconds=30))
    with psycopg.connect(collector.dsn) as conn:
        assert conn.execute("SELECT count(*) FROM straggler").fetchone() == (1,)
    # The read API serves it: the job, the GPU, the cause, the evidence.
    [served] = httpx.get(f"{collector.url}/api/v1/stragglers", params={"minutes": 60}, timeout=10).json()
    assert (served["job_id"], served["node"], served["gpu"], served["cause"]) == ("train-1", "train-1-n1", 2, "thermal")
    assert served["evidence"]["share_rise"] > 0.05 and served["ended_at"] is not None
    active = httpx.get(f"{collector.url}/api/v1/stragglers", params={"minutes": 60, "active": "true"}, timeout=10)
    assert active.json() == []


def test_sm_activity_stands_in_where_gpus_have_no_tensor_counters(collector: RunningCollector) -> None:
    start = time.time() - HISTORY_S - 20
    telemetry = simulate(JOB, [FAULT], HISTORY_S)
    del telemetry.gpu["tensor_active_pct"]  # pre-Hopper GPUs: no GPM profiling counters
    push(collector, telemetry, start, "older-1")
    watch(collector.dsn, StragglerWatch(), datetime.fromtimestamp(start + HISTORY_S + 20, UTC))
    with psycopg.connect(collector.dsn) as conn:
        rows = conn.execute("SELECT g.uuid, s.cause FROM straggler s JOIN gpu g USING (gpu_id)").fetchall()
    assert rows == [("GPU-older-1-1-2", "thermal")]


def test_two_stragglers_in_turn_across_cycles_are_both_stored(collector: RunningCollector) -> None:
    start = time.time() - HISTORY_S - 20
    first = Fault("thermal", 1, 2, onset_s=1400.0, end_s=1700.0, severity=0.2)
    second = Fault("power_cap", 0, 1, onset_s=1900.0, end_s=2200.0, severity=0.2)
    push(collector, simulate(JOB, [first, second], HISTORY_S), start, "twice-1")
    watcher = StragglerWatch()
    for offset in (1600.0, 1800.0, 2000.0, 2200.0, HISTORY_S + 20):  # cycles as time goes by
        watch(collector.dsn, watcher, datetime.fromtimestamp(start + offset, UTC))
    with psycopg.connect(collector.dsn) as conn:
        rows = conn.execute(
            "SELECT g.uuid, s.cause, s.ended_at IS NOT NULL FROM straggler s JOIN gpu g USING (gpu_id)"
            " ORDER BY s.started_at"
        ).fetchall()
    assert rows == [("GPU-twice-1-1-2", "thermal", True), ("GPU-twice-1-0-1", "power_cap", True)]


def test_a_watch_that_takes_over_adopts_what_its_predecessor_stored(
    collector: RunningCollector, pushed: datetime
) -> None:
    """A restarted collector (or another replica) replays the job's history: the straggler its
    predecessor stored is not stored again."""
    half_way = pushed - timedelta(seconds=20 + HISTORY_S - 1800)  # the fault active since 1500 s
    watch(collector.dsn, StragglerWatch(), half_way)
    watch(collector.dsn, StragglerWatch(), half_way)  # a second collector, later the same minute
    watch(collector.dsn, StragglerWatch(), pushed)  # and a third, after the fault ended
    with psycopg.connect(collector.dsn) as conn:
        rows = conn.execute("SELECT job_id, cause, ended_at IS NOT NULL FROM straggler").fetchall()
    assert rows == [("train-1", "thermal", True)]


def test_a_slow_nic_is_stored_and_served_with_its_port(collector: RunningCollector) -> None:
    start = time.time() - HISTORY_S - 20
    fault = Fault("slow_nic", 1, None, onset_s=1500.0, end_s=2100.0, severity=0.3)
    push(collector, simulate(JOB, [fault], HISTORY_S), start, "nic-1")
    watch(collector.dsn, StragglerWatch(), datetime.fromtimestamp(start + HISTORY_S + 20, UTC))
    [served] = httpx.get(f"{collector.url}/api/v1/stragglers", params={"minutes": 60}, timeout=10).json()
    assert (served["node"], served["gpu"], served["cause"]) == ("nic-1-n1", None, "slow_nic")
    assert (served["nic"], served["port"]) == ("mlx5_0", 1)


def test_the_watch_follows_a_node_that_pushes_late_instead_of_skipping_its_samples(
    collector: RunningCollector,
) -> None:
    # Sites push every 30-60 s: a fixed settling time would feed buckets before their samples came.
    start = time.time() - HISTORY_S - 20
    telemetry = simulate(JOB, [FAULT], HISTORY_S)
    push(collector, telemetry, start, "late-1", nodes=[0])
    push(collector, between(telemetry, 0, HISTORY_S - 60), start, "late-1", nodes=[1])  # a minute behind
    now = datetime.fromtimestamp(start + HISTORY_S + 5, UTC)
    watcher = StragglerWatch()
    watch(collector.dsn, watcher, now)
    behind = datetime.fromtimestamp(start + HISTORY_S - 60, UTC)
    assert behind - timedelta(seconds=10) <= watcher.jobs["late-1"].cursor <= behind
    push(collector, between(telemetry, HISTORY_S - 60, HISTORY_S), start, "late-1", nodes=[1])
    watch(collector.dsn, watcher, now)
    assert watcher.jobs["late-1"].cursor >= behind + timedelta(seconds=45)


def test_a_bucket_is_complete_for_a_gpu_once_its_next_sample_would_fall_past_it() -> None:
    bucket = datetime(2026, 11, 28, 12, 0, 5, tzinfo=UTC)
    after = bucket + timedelta(seconds=5)
    # Sampled every 5 s: its one sample in the bucket completes it (but for a phase within the
    # half-second allowed for timers' jitter, where the next might fall in the same bucket).
    assert _done(bucket + timedelta(seconds=0.6), 5.0) == after
    assert _done(bucket + timedelta(seconds=4.9), 5.0) == after
    assert _done(bucket + timedelta(seconds=0.3), 5.0) == bucket
    # Sampled every second: complete only with the bucket's last sample.
    assert _done(bucket + timedelta(seconds=2), 1.0) == bucket
    assert _done(bucket + timedelta(seconds=4.3), 1.0) == after
    # One sample in the window: no spacing known, so the bucket waits for a later sample.
    assert _done(bucket + timedelta(seconds=4.9), None) == bucket
