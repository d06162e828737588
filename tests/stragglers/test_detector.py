"""The straggler detector on small simulated jobs: it finds the injected culprit, names the cause,
estimates the slowdown, ends the straggler after the fault, and stays quiet on clean jobs (with their
checkpoints, drift and permanently heavier last stage)."""

from __future__ import annotations

import numpy as np
import pytest

from gpuscope.bench.stragglers import detect
from gpuscope.exporter.sim.training import Fault, Telemetry, TrainingJob, simulate

JOB = TrainingJob(nodes=3, gpus_per_node=8, last_stage_extra=0.15, seed=21)
ONSET, END = 1200.0, 2100.0


@pytest.mark.parametrize(
    ("kind", "node", "gpu"), [("thermal", 0, 6), ("power_cap", 2, 1), ("slow_nic", 1, None), ("slow_host", 2, None)]
)
def test_finds_the_culprit_and_names_the_cause(kind: str, node: int, gpu: int | None) -> None:
    fault = Fault(kind, node, gpu, ONSET, END, 0.2)
    [straggler] = detect(simulate(JOB, [fault], 3600), JOB)
    assert (straggler.node, straggler.gpu, straggler.cause) == (node, gpu, kind)
    assert ONSET <= straggler.declared_s <= ONSET + 90
    assert straggler.slowdown == pytest.approx(0.2, abs=0.04)
    assert straggler.ended_s is not None and END <= straggler.ended_s <= END + 120


def test_stays_quiet_on_clean_jobs_with_checkpoints_and_a_heavier_last_stage() -> None:
    for seed in range(3):
        job = TrainingJob(nodes=4, gpus_per_node=8, last_stage_extra=0.15, checkpoint_every_s=900, seed=seed)
        assert detect(simulate(job, [], 4 * 3600), job) == []


def test_a_blip_shorter_than_the_persistence_is_not_declared() -> None:
    blip = Fault("thermal", 1, 2, ONSET, ONSET + 10, 0.2)
    assert detect(simulate(JOB, [blip], 3600), JOB) == []


def _starting_slowly(telemetry: Telemetry, ramp_s: float, first: float) -> Telemetry:
    """The job's first `ramp_s` as real jobs start (compilation, data loading, warm-up): every rank's
    activity rises from `first` of its steady level, together."""
    scale = np.clip(first + (1 - first) * telemetry.times / ramp_s, first, 1.0)
    for key in ("tensor_active_pct", "sm_active_pct"):
        telemetry.gpu[key] = telemetry.gpu[key] * scale
    return telemetry


@pytest.mark.parametrize("severity", [0.1, 0.2, 0.5])
@pytest.mark.parametrize(("kind", "node", "gpu"), [("thermal", 1, 2), ("slow_host", 0, None)])
def test_a_slow_start_hides_no_slowdown_and_the_estimate_is_within_a_quarter(
    kind: str, node: int, gpu: int | None, severity: float
) -> None:
    # The failure an independent generator found: jobs that start slowly left the job's normal activity
    # far below its steady state, so a job slowed 1.5x read as 3-8% slower, and 10-20% as nothing.
    fault = Fault(kind, node, gpu, ONSET, END, severity)
    telemetry = _starting_slowly(simulate(JOB, [fault], 3600), ramp_s=600, first=0.3)
    during = (telemetry.times >= ONSET) & (telemetry.times < END)
    truth = float(np.nanmedian(telemetry.slowdown()[during]))
    [straggler] = detect(telemetry, JOB)
    assert (straggler.node, straggler.gpu, straggler.cause) == (node, gpu, kind)
    assert abs(straggler.slowdown - truth) <= 0.25 * truth, (straggler.slowdown, truth)
