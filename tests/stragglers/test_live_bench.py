"""The end-to-end straggler benchmark's parts: its scenarios, its pushing through the ingest API, its scoring."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import httpx

from gpuscope.bench import stragglers_live as live
from gpuscope.exporter.sim.training import FAULT_KINDS
from tests.conftest import count_rows
from tests.processes import RunningCollector


def test_every_fault_kind_at_every_severity_and_clean_jobs() -> None:
    jobs = live.scenarios()
    faults = {(j.fault.kind, j.fault.severity) for j in jobs if j.fault is not None}
    assert faults == {(k, s) for k in FAULT_KINDS for s in live.SEVERITIES}
    assert sum(j.fault is None for j in jobs) == 2
    assert all(j.fault is None or j.fault.onset_s == live.HISTORY_S + live.ONSET_AFTER_S for j in jobs)


def test_samples_are_pushed_once_as_their_time_comes(collector: RunningCollector) -> None:
    job = live.scenarios()[0]
    with httpx.Client(timeout=30) as client:
        started = time.time() - 600
        live.push_due(client, collector.url, collector.token, job, started, started + 60)
        assert job.sent == 13  # samples at 0, 5, ..., 60 s
        live.push_due(client, collector.url, collector.token, job, started, started + 60)  # nothing new
        live.push_due(client, collector.url, collector.token, job, started, started + 64.9)
        assert job.sent == 13
        live.push_due(client, collector.url, collector.token, job, started, started + 65)
    assert count_rows(collector.dsn, "gpu_sample") == 14 * job.job.ranks
    assert count_rows(collector.dsn, "job_allocation") == job.job.ranks


def test_scoring_counts_only_the_right_place_and_cause() -> None:
    jobs = [j for j in live.scenarios() if j.fault is None or j.fault.severity == 0.5][:3]
    onset = 1000.0
    right, wrong, clean = jobs[0], jobs[1], next(j for j in live.scenarios() if j.fault is None)
    assert right.fault is not None and wrong.fault is not None

    def row(job: live.LiveJob, node: int, gpu: int | None, cause: str) -> dict[str, object]:
        declared = datetime.fromtimestamp(onset + 35, UTC).isoformat()  # 5-15 s before each is seen
        return {
            "job_id": job.job_id, "node": f"{job.job_id}-n{node}", "gpu": gpu, "cause": cause, "slowdown": 0.45,
            "declared_at": declared,
        }  # fmt: skip

    seen = {
        right.job_id: (onset + 50, row(right, right.fault.node, right.fault.gpu, right.fault.kind)),
        wrong.job_id: (onset + 40, row(wrong, wrong.fault.node + 1, None, "slow_host")),
        clean.job_id: (onset + 10, row(clean, 0, None, "slow_nic")),
    }
    score = live._score([right, wrong, clean], seen, onset)
    assert score["precision"] == round(1 / 3, 3)
    assert score["recall_50pct"] == 0.5
    assert score["onset_to_api_p50_s"] == 50.0
    assert score["slowdown_error_median"] == 0.1
    assert score["false_alarms_clean_jobs"] == 1
    assert (score["declared_to_api_p50_s"], score["declared_to_api_max_s"]) == (5.0, 15.0)
