"""Which simulated job runs on which nodes, and when.

Nodes are partitioned once (by seed) into groups of 1, 2 or 4 neighbours; each group runs a sequence
of jobs separated by idle gaps. The schedule is a pure function of (seed, wall-clock time): time is cut
into fixed epochs and each (group, epoch) pair draws its own jobs from its own generator, so any
process, started at any time, agrees on who runs what. Each group's epochs start at its own offset:
the last job of an epoch ends at its boundary, and if every group shared the boundaries, every GPU of
the cluster would go idle at once every two hours, a fake outage no real scheduler produces.

A scenario (the demo's) can pin jobs of its own on chosen nodes, which then run those instead, and
slow one GPU of a pinned job down from a given time: the ground truth of a straggler. Pins and faults
are part of the schedule, so every node of the job agrees on the step time they cause.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from gpuscope.exporter.sim.topology import NodeSpec

EPOCH_SECONDS = 7200.0
USERS = ("alice", "bob", "chen", "dana", "emeka", "farah", "goran", "hiro")
# Each user's Slurm account (their group), as a site's accounting would have it: reports group by it.
ACCOUNTS = {"alice": "physics", "bob": "physics", "chen": "biology", "dana": "biology", "emeka": "ml-research",
            "farah": "ml-research", "goran": "ml-research", "hiro": "climate"}  # fmt: skip
JOB_NAMES = ("llama-pretrain", "moe-sft", "vit-finetune", "rlhf-ppo", "diffusion-xl", "bert-eval")


@dataclass(frozen=True)
class JobRun:
    job_id: str
    user: str
    name: str
    nodes: tuple[int, ...]  # node indices
    start: float
    end: float
    step_seconds: float  # compute time of a typical rank for one synchronous step
    intensity: float  # 0..1, how hard the model drives the tensor cores
    heavy_rank_extra: float  # the last rank (last pipeline stage) always does this much more work
    idle: bool = False  # holds its GPUs and runs nothing on them (a forgotten notebook, a hung job)

    @property
    def ranks(self) -> int:
        return len(self.nodes)

    def covers(self, t: float) -> bool:
        return self.start <= t < self.end


@dataclass(frozen=True)
class SlowGpu:
    """From `onset`, one GPU of a job computes slower, so that every step of the job takes
    `1 + severity` times as long (a failing fan: the GPU slows its clocks to stay under its limit)."""

    node: int  # node index in the cluster
    gpu: int  # local GPU index
    onset: float
    severity: float


class JobSchedule:
    def __init__(self, topology: tuple[NodeSpec, ...], seed: int) -> None:
        self._seed = seed
        self._groups = _partition(len(topology), seed)
        self._group_of = {node: g for g, members in enumerate(self._groups) for node in members}
        offsets = np.random.default_rng([seed, 0xE90C]).uniform(0.0, EPOCH_SECONDS, len(self._groups))
        self._offset = offsets.tolist()
        self._cache: dict[tuple[int, int], tuple[JobRun, ...]] = {}
        self._lock = threading.Lock()
        self._pinned: list[JobRun] = []
        self._slow: dict[str, SlowGpu] = {}

    def pin(self, job: JobRun) -> None:
        """Run `job` on its nodes for its time, instead of whatever the draw put there."""
        with self._lock:
            self._pinned.append(job)

    def slow_gpu(self, job_id: str, fault: SlowGpu) -> None:
        """Slow one GPU of pinned job `job_id` from `fault.onset`: the straggler the watch should find."""
        if not any(job.job_id == job_id and fault.node in job.nodes for job in self._pinned):
            raise ValueError(f"no pinned job {job_id} on node {fault.node}")
        with self._lock:
            self._slow[job_id] = fault

    def slow_gpu_of(self, job: JobRun, t: float) -> SlowGpu | None:
        fault = self._slow.get(job.job_id)
        return fault if fault is not None and fault.onset <= t else None

    def job_at(self, node_index: int, t: float) -> JobRun | None:
        for job in self._pinned:
            if node_index in job.nodes and job.covers(t):
                return job
        group = self._group_of[node_index]
        for job in self._jobs(group, self._epoch(group, t)):
            if job.covers(t):
                return job
        return None

    def _epoch(self, group: int, t: float) -> int:
        return int((t - self._offset[group]) // EPOCH_SECONDS)

    def jobs_between(self, start: float, end: float) -> list[JobRun]:
        """Every job that overlaps [start, end), in start order."""
        found = [j for j in self._pinned if j.start < end and j.end > start]
        for group in range(len(self._groups)):
            for epoch in range(self._epoch(group, start), self._epoch(group, end) + 1):
                found.extend(j for j in self._jobs(group, epoch) if j.start < end and j.end > start)
        return sorted(found, key=lambda j: (j.start, j.nodes))

    def _jobs(self, group: int, epoch: int) -> tuple[JobRun, ...]:
        key = (group, epoch)
        with self._lock:
            if key not in self._cache:
                self._cache[key] = self._draw(group, epoch)
            return self._cache[key]

    def _draw(self, group: int, epoch: int) -> tuple[JobRun, ...]:
        rng = np.random.default_rng([self._seed, group, epoch % (2**32), epoch // (2**32)])
        nodes = self._groups[group]
        t = epoch * EPOCH_SECONDS + self._offset[group]
        end_of_epoch = t + EPOCH_SECONDS
        jobs = []
        while True:
            t += float(rng.uniform(20.0, 240.0))  # idle gap between jobs
            duration = float(rng.uniform(300.0, 3000.0))
            if t + 120.0 >= end_of_epoch:
                break
            jobs.append(
                JobRun(
                    job_id=str(int(rng.integers(100_000, 1_000_000))),
                    user=USERS[int(rng.integers(len(USERS)))],
                    name=JOB_NAMES[int(rng.integers(len(JOB_NAMES)))],
                    nodes=nodes,
                    start=t,
                    end=min(t + duration, end_of_epoch),
                    step_seconds=float(rng.uniform(0.4, 1.5)),
                    intensity=float(rng.uniform(0.65, 1.0)),
                    heavy_rank_extra=float(rng.uniform(0.03, 0.08)) if len(nodes) > 1 else 0.0,
                )
            )
            t += duration
        return tuple(jobs)


def _partition(node_count: int, seed: int) -> tuple[tuple[int, ...], ...]:
    rng = np.random.default_rng([seed, 0x6A0B])
    groups = []
    start = 0
    while start < node_count:
        size = min(int(rng.choice([1, 2, 2, 4, 4])), node_count - start)
        groups.append(tuple(range(start, start + size)))
        start += size
    return tuple(groups)
