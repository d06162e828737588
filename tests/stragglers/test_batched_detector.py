"""Many jobs' detectors advanced together (stragglers/batch.py) decide exactly what each job's own
JobDetector decides: the same events (kinds, culprits, times, causes) and the same slowdown estimates,
for jobs of several layouts that start and end at different times (rows freed and reused), pause, lose
a GPU's samples, carry a straggler of each cause the simulator makes (thermal, power cap, slow NIC, slow
host, and as variants of a thermal fault a degraded GPU and a failing NVLink), or are independent
replicas. The fabric's cause goes through the same judgement (stragglers/judge.py); the watch's tests
take it through the batch (tests/stragglers/test_watch_findings.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pytest

from gpuscope.bench.stragglers import readings as readings_of
from gpuscope.exporter.sim.training import Fault, TrainingJob, simulate
from gpuscope.stragglers.batch import DetectorBatches
from gpuscope.stragglers.detector import JobDetector, Settings
from gpuscope.stragglers.events import StragglerEvent
from gpuscope.stragglers.readings import PER_GPU, PER_PORT, ReadingRows, Readings

SAMPLE_S = 5.0
SETTINGS = Settings(sample_s=SAMPLE_S, warmup_s=300.0, window_s=300.0)  # shorter, so short jobs are judged


@dataclass
class Job:
    node_of: np.ndarray
    port_node: np.ndarray
    start_step: int  # on the fleet's clock
    samples: list[Readings]


def _job(seed: int, nodes: int, gpus_per_node: int, start_step: int, steps: int, cause: str | None) -> Job:
    rng = np.random.default_rng(seed)
    train = TrainingJob(
        nodes=nodes, gpus_per_node=gpus_per_node, seed=seed, checkpoint_every_s=float(rng.choice([1e9, 900]))
    )
    onset = float(rng.uniform(0.45, 0.55)) * steps * SAMPLE_S
    end = onset + float(rng.uniform(0.15, 0.3)) * steps * SAMPLE_S
    node, gpu = int(rng.integers(nodes)), int(rng.integers(gpus_per_node))
    kind = {"gpu_degraded": "thermal", "nvlink": "thermal", "independent": None, None: None}.get(cause, cause)
    faults = (
        [] if kind is None else [Fault(kind, node, gpu if kind in ("thermal", "power_cap") else None, onset, end, 0.25)]
    )
    telemetry = simulate(train, faults, steps * SAMPLE_S, SAMPLE_S)
    samples = list(readings_of(telemetry))
    rank = node * gpus_per_node + gpu
    # Independent replicas: each GPU's load wanders by itself.
    wander = np.exp(np.cumsum(rng.normal(0, 0.03, (len(samples), nodes * gpus_per_node)), axis=0))
    out = []
    for i, sample in enumerate(samples):
        t = sample.t_s
        changes: dict[str, np.ndarray | None] = {}
        if cause in ("gpu_degraded", "nvlink"):  # slower at normal clocks, no named reason
            clock, bits = sample.sm_clock_mhz.copy(), sample.clock_event_reasons.copy()
            clock[rank], bits[rank] = float(np.median(clock)), 0.0
            changes |= {"sm_clock_mhz": clock, "clock_event_reasons": bits}
        if cause == "gpu_degraded" and onset <= t < end:  # busy longer for the same work: stalls
            work = sample.work.copy()
            work[rank] = float(np.median(np.delete(work, rank)))
            changes["work"] = work
        if cause == "independent":
            changes |= {"work": sample.work * wander[i], "sm_active_pct": sample.sm_active_pct * wander[i]}
        if cause == "nvlink" or seed % 3 == 0:
            errors = np.zeros(sample.gpus)
            if cause == "nvlink" and onset <= t < end:
                errors[rank] = 50.0
            changes["nvlink_errors_per_s"] = errors
        if seed % 4 == 1 and 0.7 * steps <= i < 0.8 * steps:  # a GPU goes silent
            for name in ("work", "util_pct", "sm_active_pct", "power_w", "sm_clock_mhz"):
                values = (changes.get(name) if name in changes else getattr(sample, name)).copy()
                values[(rank + 1) % sample.gpus] = np.nan
                changes[name] = values
        if seed % 5 == 2 and 0.3 * steps <= i < 0.33 * steps:  # paused: evaluation, every rank idle
            changes |= {"work": sample.work * 0.01, "sm_active_pct": sample.sm_active_pct * 0.01}
        out.append(replace(sample, t_s=(start_step + i + 1) * SAMPLE_S, **changes))
    node_of = np.arange(nodes * gpus_per_node) // gpus_per_node
    return Job(node_of, np.arange(nodes), start_step, out)


def _fleet(seed: int) -> list[Job]:
    rng = np.random.default_rng(seed)
    causes = [None, "thermal", "power_cap", "slow_nic", "slow_host", "gpu_degraded", "nvlink", "independent"]
    shapes = [(1, 8), (2, 4), (4, 2), (3, 3), (1, 8)]
    jobs = []
    for i, cause in enumerate(causes * 2):
        nodes, gpus = shapes[(i + seed) % len(shapes)]
        start, steps = int(rng.integers(0, 900)), int(rng.integers(450, 700))  # some start after others end
        jobs.append(_job(seed * 100 + i, nodes, gpus, start, steps, cause))
    return jobs


def _events(events: tuple[StragglerEvent, ...]) -> list[tuple[object, ...]]:
    return [
        (e.kind, e.straggler.node, e.straggler.gpu, e.straggler.port, e.straggler.cause, e.straggler.started_s,
         e.straggler.declared_s, e.straggler.ended_s, e.straggler.slowdown)
        for e in events
    ]  # fmt: skip


def _together(jobs: list[Job]) -> tuple[list[list[tuple[object, ...]]], list[tuple[str, float]]]:
    batches = DetectorBatches(SETTINGS)
    found: list[list[tuple[object, ...]]] = [[] for _ in jobs]
    models = [("", math.nan)] * len(jobs)
    detectors = {}
    last = max(job.start_step + len(job.samples) for job in jobs)
    for step in range(last):
        live = {}
        for j, job in enumerate(jobs):
            if step == job.start_step:
                detectors[j] = batches.add(job.node_of, job.port_node)
            if job.start_step <= step < job.start_step + len(job.samples):
                live.setdefault(id(detectors[j].batch), []).append(j)
            elif step == job.start_step + len(job.samples):  # ended: its row is free for the next job
                models[j] = (detectors[j].model, detectors[j].wander)
                detectors.pop(j).release()
        for members in live.values():
            batch = detectors[members[0]].batch
            samples = [jobs[j].samples[step - jobs[j].start_step] for j in members]
            rows = np.array([detectors[j].row for j in members])
            for row, events in batch.update(rows, _rows(samples)).items():
                found[members[int(np.flatnonzero(rows == row)[0])]].extend(_events(events))
    for j, detector in detectors.items():
        models[j] = (detector.model, detector.wander)
    return found, models


def _rows(samples: list[Readings]) -> ReadingRows:
    def stacked(name: str) -> np.ndarray:
        return np.vstack([
            np.full(s.work.shape if name in PER_GPU else s.xmit_wait_per_s.shape, np.nan)
            if getattr(s, name) is None else getattr(s, name) for s in samples
        ])  # fmt: skip

    return ReadingRows(samples[0].t_s, **{name: stacked(name) for name in PER_GPU + PER_PORT})


def _assert_same(expected: list[tuple[object, ...]], got: list[tuple[object, ...]]) -> None:
    assert [e[:-1] for e in got] == [e[:-1] for e in expected]
    for want, have in zip(expected, got, strict=True):
        assert math.isclose(float(have[-1]), float(want[-1]), rel_tol=0, abs_tol=1e-9)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", [1, 2])
def test_the_batch_decides_what_each_job_alone_decides(seed: int) -> None:
    jobs = _fleet(seed)
    together, models = _together(jobs)
    causes = set()
    for job, got, model in zip(jobs, together, models, strict=True):
        detector = JobDetector.for_ranks(job.node_of, SETTINGS, port_node=job.port_node)
        expected = [event for sample in job.samples for event in _events(detector.update(sample))]
        _assert_same(expected, got)
        assert model[0] == detector.model
        assert model[1] == detector.wander or (math.isnan(model[1]) and math.isnan(detector.wander))
        causes |= {event[4] for event in expected}
    # The family exercises the judgement, not only the quiet path.
    assert {"thermal", "power_cap", "slow_nic", "slow_host", "gpu_degraded", "nvlink"} <= causes
    assert {"synchronous", "independent"} <= {model for model, _ in models}


def test_rows_of_readings_must_match_the_layout() -> None:
    batches = DetectorBatches(SETTINGS)
    detector = batches.add([0, 0, 1, 1], [0, 1])
    sample = _rows([_job(3, 1, 3, 0, 10, None).samples[0]])
    with pytest.raises(ValueError, match="GPUs"):
        detector.batch.update(np.array([detector.row]), sample)
