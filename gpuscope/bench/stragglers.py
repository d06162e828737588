"""Straggler detection scored on simulated training jobs with injected faults (exporter/sim/training.py).

A seeded suite: job shapes, fault kinds, places, onsets, durations and severities (5, 10, 20, 50% job
slowdown) drawn per seed, a quarter of the jobs clean. The detector sees each job's telemetry sample by
sample, as it would live, and is scored against the ground truth:
- a declared straggler is right when it overlaps a fault (to 2 minutes after it ends) on the right node
  (and GPU, for a GPU fault): precision over all declared, recall per severity over all faults;
- latency: declaration time minus onset, for slowdowns of 20% and more;
- false alerts per 1,000 job-hours: declarations on clean jobs;
- localisation: declarations overlapping a fault that name its place; cause accuracy likewise;
- slowdown estimate: |reported - true| / true per fault found (true: the job's step time during the
  fault against its clean step time, exact by construction), median and 90th percentile.
Tuned on seeds 0-199 only; the same figures on held-out seeds are reported beside them: 2000-2199 (the
earlier held-out range, 1000-1199, was looked at once to study its misses, so it is held out no more).
False alerts are also counted over a separate clean suite of more than 1,000 job-hours (seeds 5000-5199,
six hours each), since a rate of one per 1,000 job-hours cannot be shown on a hundred.
Cost: one update of 1,000 running jobs of 10 GPUs each (10,000 GPUs), timed.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuscope.bench import stragglers_cycle, stragglers_families
from gpuscope.exporter.sim.training import FAULT_KINDS, Fault, Telemetry, TrainingJob, simulate
from gpuscope.stragglers.detector import JobDetector, Settings
from gpuscope.stragglers.events import Findings, Straggler
from gpuscope.stragglers.readings import Readings

SEVERITIES = (0.05, 0.1, 0.2, 0.5)
TUNING = range(0, 200)
HELD_OUT = range(2000, 2200)
CLEAN = range(5000, 5200)
CLEAN_HOURS = 6.0
GRACE_S = 120.0


@dataclass
class Scenario:
    job: TrainingJob
    fault: Fault | None
    duration_s: float


def scenario(seed: int) -> Scenario:
    rng = np.random.default_rng(seed)
    job = TrainingJob(
        nodes=int(rng.integers(2, 9)),
        gpus_per_node=8,
        step_s=float(rng.uniform(0.6, 2.5)),
        comm_fraction=float(rng.uniform(0.15, 0.35)),
        last_stage_extra=float(rng.choice([0.0, 0.08, 0.15])),
        seed=seed,
    )
    duration = float(rng.uniform(2, 3) * 3600)
    if rng.random() < 0.25:
        return Scenario(job, None, duration)
    kind = str(rng.choice(FAULT_KINDS))
    onset = float(rng.uniform(900, duration - 2700))
    fault = Fault(
        kind=kind,
        node=int(rng.integers(job.nodes)),
        gpu=int(rng.integers(job.gpus_per_node)) if kind in ("thermal", "power_cap") else None,
        onset_s=onset,
        end_s=onset + float(rng.uniform(180, 2400)),
        severity=float(rng.choice(SEVERITIES)),
    )
    return Scenario(job, fault, duration)


def detect(telemetry: Telemetry, job: TrainingJob) -> list[Straggler]:
    detector = JobDetector(job.nodes, job.gpus_per_node)
    findings = Findings()
    for sample in readings(telemetry):
        findings.add(detector.update(sample))
    return findings.stragglers


def readings(telemetry: Telemetry) -> Iterator[Readings]:
    """The job's telemetry sample by sample, as the watch reads it from the database."""
    step = telemetry.times[1] - telemetry.times[0]
    wait, sent = (np.diff(telemetry.nic[key], axis=1, prepend=np.nan) / step for key in ("xmit_wait", "xmit_bytes"))
    wait[:, 0], sent[:, 0] = wait[:, 1], sent[:, 1]
    gpu = telemetry.gpu
    for i, t in enumerate(telemetry.times):
        yield Readings(
            float(t),
            work=gpu["tensor_active_pct"][:, i],
            util_pct=gpu["util_pct"][:, i],
            sm_clock_mhz=gpu["sm_clock_mhz"][:, i],
            clock_event_reasons=gpu["clock_event_reasons"][:, i],
            xmit_wait_per_s=wait[:, i],
            link_gbps=telemetry.nic["rate_gbps"][:, i],
            xmit_bytes_per_s=sent[:, i],
            sm_active_pct=gpu["sm_active_pct"][:, i],  # as the watch feeds it: how busy, beside the work
            power_w=gpu["power_w"][:, i],
        )


def score(seeds: range) -> dict[str, Any]:
    declared = right = caused = 0
    clean_hours = clean_alerts = 0.0
    found = {s: [0, 0] for s in SEVERITIES}  # severity -> [detected, faults]
    latencies: list[float] = []
    errors: list[float] = []  # |reported - true| / true slowdown, per fault found
    overlapping_total_seen: list[int] = []
    for seed in seeds:
        case = scenario(seed)
        telemetry = simulate(case.job, [case.fault] if case.fault else [], case.duration_s)
        stragglers = detect(telemetry, case.job)
        declared += len(stragglers)
        if case.fault is None:
            clean_hours += case.duration_s / 3600
            clean_alerts += len(stragglers)
            continue
        fault = case.fault
        overlapping = [s for s in stragglers if _overlaps(s, fault)]
        matching = [s for s in overlapping if s.node == fault.node and s.gpu == fault.gpu]
        right += len(matching)
        caused += sum(s.cause == fault.kind for s in matching)
        found[fault.severity][1] += 1
        if matching:
            found[fault.severity][0] += 1
            truth = _true_slowdown(telemetry, fault)
            errors.append(abs(matching[0].slowdown - truth) / truth)
            if fault.severity >= 0.2:
                latencies.append(min(s.declared_s for s in matching) - fault.onset_s)
        overlapping_total_seen.append(len(overlapping))
    overlapping_total = max(1, sum(overlapping_total_seen))
    recall = {f"recall_{int(s * 100)}pct": round(d / max(1, n), 3) for s, (d, n) in found.items()}
    big = [found[s] for s in SEVERITIES if s >= 0.1]
    return {
        "scenarios": len(seeds),
        "precision": round(right / max(1, declared), 3),
        "recall_ge10": round(sum(d for d, _ in big) / max(1, sum(n for _, n in big)), 3),
        **recall,
        "latency_p95_s": round(float(np.percentile(latencies, 95)), 1) if latencies else None,
        "latency_p50_s": round(statistics.median(latencies), 1) if latencies else None,
        "false_alerts_per_1000_job_hours": round(1000 * clean_alerts / max(clean_hours, 1e-9), 2),
        "clean_job_hours": round(clean_hours, 1),
        "localisation": round(right / overlapping_total, 3),
        "slowdown_error_median": round(statistics.median(errors), 3) if errors else None,
        "slowdown_error_p90": round(float(np.percentile(errors, 90)), 3) if errors else None,
        "cause_accuracy": round(caused / max(1, right), 3),
    }


def clean_suite(seeds: range) -> dict[str, Any]:
    """False alerts on long clean runs: shapes drawn like the scored suite, no faults."""
    alerts, hours = 0, 0.0
    for seed in seeds:
        job = scenario(seed).job
        alerts += len(detect(simulate(job, [], CLEAN_HOURS * 3600), job))
        hours += CLEAN_HOURS
    return {"clean_suite_job_hours": hours, "clean_suite_false_alerts": alerts}


def _true_slowdown(telemetry: Telemetry, fault: Fault) -> float:
    """What the fault did to the job's step time (exact by construction), over its active samples."""
    during = (telemetry.times >= fault.onset_s) & (telemetry.times < fault.end_s)
    return float(np.nanmedian(telemetry.slowdown()[during]))


def _overlaps(straggler: Straggler, fault: Fault) -> bool:
    end = straggler.ended_s if straggler.ended_s is not None else float("inf")
    return straggler.started_s <= fault.end_s + GRACE_S and end >= fault.onset_s


def cycle_cost(jobs: int = 1000, gpus_per_job: int = 10) -> float:
    """Seconds for one update of `jobs` running jobs (1,000 x 10 GPUs = 10,000 GPUs), after warm-up."""
    rng = np.random.default_rng(0)
    detectors = [JobDetector(2, gpus_per_job // 2) for _ in range(jobs)]
    samples = [
        (rng.uniform(30, 40, gpus_per_job), rng.uniform(95, 100, gpus_per_job), np.full(gpus_per_job, 1980.0))
        for _ in range(jobs)
    ]
    zeros, wait, link, sent = np.zeros(gpus_per_job), np.full(2, 1e4), np.full(2, 400.0), np.full(2, 2e9)

    def sample_of(t: float, tensor: np.ndarray, util: np.ndarray, clock: np.ndarray) -> Readings:
        return Readings(
            t, work=tensor, util_pct=util, sm_clock_mhz=clock, clock_event_reasons=zeros,
            xmit_wait_per_s=wait, link_gbps=link, xmit_bytes_per_s=sent,
        )  # fmt: skip

    end = Settings().warmup_s + 60  # past the warm-up, so the judging runs too
    for t in np.arange(0, end, 5):
        for detector, sample in zip(detectors, samples, strict=True):
            detector.update(sample_of(float(t), *sample))
    last = [sample_of(end, *sample) for sample in samples]
    started = time.perf_counter()
    for detector, sample_readings in zip(detectors, last, strict=True):
        detector.update(sample_readings)
    return time.perf_counter() - started


def run() -> dict[str, Any]:
    tuning = score(TUNING)
    held_out = score(HELD_OUT)
    clean = clean_suite(CLEAN)
    hours = held_out["clean_job_hours"] + clean["clean_suite_job_hours"]
    alerts = held_out["false_alerts_per_1000_job_hours"] * held_out["clean_job_hours"] / 1000
    alerts += clean["clean_suite_false_alerts"]
    return {
        **held_out,
        # Over the held-out clean jobs and the clean suite together.
        "false_alerts_per_1000_job_hours": round(1000 * alerts / hours, 3),
        "clean_job_hours": round(hours, 1),
        **clean,
        "seeds": f"{HELD_OUT.start}-{HELD_OUT.stop - 1} (held out; tuned on {TUNING.start}-{TUNING.stop - 1})",
        "tuning_seeds": tuning,
        "cycle_s_1000_jobs_10000_gpus": round(cycle_cost(), 3),  # the detector alone
        # The watch as in production: 10,000 GPUs read from PostgreSQL, fed, stored, every 5 s.
        "watch_through_database": stragglers_cycle.run(),
        # Physics written apart from the detector and this suite (gpuscope/bench/workloads), per family.
        "families": stragglers_families.run(),
        "sample_s": 5.0,
    }
