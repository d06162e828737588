"""What the detector reports and what it reads: one straggler's life as events (declared, updated, ended)
under one key, and readings that do not fit the job refused with a clear error."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from gpuscope.bench.stragglers import readings
from gpuscope.exporter.sim.training import Fault, TrainingJob, simulate
from gpuscope.stragglers.detector import JobDetector
from gpuscope.stragglers.events import Findings, StragglerEvent
from gpuscope.stragglers.readings import Readings

JOB = TrainingJob(nodes=3, gpus_per_node=8, seed=21)
FAULT = Fault("thermal", 0, 6, onset_s=1200.0, end_s=2100.0, severity=0.2)


def test_a_straggler_is_declared_updated_and_ended_under_one_key() -> None:
    detector = JobDetector(JOB.nodes, JOB.gpus_per_node)
    events: list[StragglerEvent] = []
    for sample in readings(simulate(JOB, [FAULT], 3600)):
        events.extend(detector.update(sample))
    kinds = [e.kind for e in events]
    assert kinds[0] == "declared" and kinds[-1] == "ended" and set(kinds[1:-1]) == {"updated"}
    assert {e.key for e in events} == {(0, 6, None, "thermal", events[0].straggler.started_s)}
    declared, ended = events[0].straggler, events[-1].straggler
    assert declared.ended_s is None and ended.ended_s is not None and ended.ended_s >= FAULT.end_s
    assert ended == replace(declared, slowdown=ended.slowdown, ended_s=ended.ended_s)
    # Each update carries a new estimate, and the straggler as it stands: the last is what ended.
    assert all(a.straggler.slowdown != b.straggler.slowdown for a, b in itertools.pairwise(events[:-1]))
    assert ended.slowdown == events[-2].straggler.slowdown == pytest.approx(0.2, abs=0.04)
    assert detector.active is None
    findings = Findings()
    findings.add(events)
    assert findings.stragglers == [ended]


def _readings(gpus: int, ports: int, **changed: np.ndarray) -> Readings:
    values = {
        "work": np.full(gpus, 40.0),
        "util_pct": np.full(gpus, 99.0),
        "sm_clock_mhz": np.full(gpus, 1980.0),
        "clock_event_reasons": np.zeros(gpus),
        "xmit_wait_per_s": np.full(ports, 1e4),
        "link_gbps": np.full(ports, 400.0),
    }
    return Readings(0.0, **(values | changed))


def test_readings_of_the_wrong_shape_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="power_w has shape \\(3,\\), not one value per GPU"):
        _readings(4, 2, power_w=np.zeros(3))
    with pytest.raises(ValueError, match="link_gbps has shape \\(4,\\), not one value per port"):
        _readings(4, 2, link_gbps=np.zeros(4))
    with pytest.raises(ValueError, match="work must hold one value per GPU"):
        _readings(4, 2, work=np.zeros((4, 2)))


def test_readings_of_another_job_are_refused() -> None:
    detector = JobDetector(2, 4)  # 8 GPUs, one port per node
    detector.update(_readings(8, 2))
    with pytest.raises(ValueError, match="readings of 6 GPUs and 2 ports for a job of 8 GPUs and 2 ports"):
        detector.update(_readings(6, 2))
    with pytest.raises(ValueError, match="readings of 8 GPUs and 3 ports"):
        detector.update(_readings(8, 3))
