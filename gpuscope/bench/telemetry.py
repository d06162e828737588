"""One day of a GPU fleet's telemetry, the same samples for every store a bench compares.

Values follow the physics and the driver rather than uniform noise, because both stores compress what
they are given: utilisation is a whole percent (NVML), SM and tensor activity have DCGM's 0.1 % steps,
power is in whole milliwatts, temperature in whole degrees, clocks in MHz. A GPU in a job runs near
full with short dips (data loading, checkpoints), its temperature rises toward a steady state after the
job starts; a free GPU idles at low clocks and power. Every value depends only on its GPU and time step,
so a store loaded in chunks of any size gets the same samples.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

METRICS = ("util_pct", "sm_active_pct", "tensor_active_pct", "power_w", "temp_c", "sm_clock_mhz")
GPUS_PER_NODE = 8
NODES_PER_RACK = 4
GPUS_PER_JOB = 64  # eight nodes: a job that a researcher asks after
GAP_STEPS = 60  # ten minutes between one job's end and the next one's start on the same GPUs


@dataclass(frozen=True)
class GpuId:
    cluster: str
    rack: str
    node: str
    index: int
    uuid: str


@dataclass(frozen=True)
class JobSpan:
    job_id: str
    user: str
    gpus: tuple[int, ...]  # positions in Telemetry.gpus
    first_step: int
    end_step: int  # exclusive


@dataclass(frozen=True)
class Telemetry:
    start: float  # epoch seconds of step 0, a multiple of step_s
    step_s: int
    steps: int
    gpus: tuple[GpuId, ...]
    jobs: tuple[JobSpan, ...]
    seed: int

    @property
    def end(self) -> float:
        """The time of the last sample."""
        return self.start + (self.steps - 1) * self.step_s

    def stamps(self, lo: int, hi: int) -> np.ndarray:
        return self.start + np.arange(lo, hi, dtype=np.float64) * self.step_s

    def job_index(self, lo: int, hi: int) -> np.ndarray:
        """(steps, gpus): the position in `jobs` of the job holding each GPU, -1 for none."""
        held = np.full((hi - lo, len(self.gpus)), -1, dtype=np.int64)
        for position, job in enumerate(self.jobs):
            first, end = max(job.first_step, lo), min(job.end_step, hi)
            if first < end:
                held[first - lo : end - lo, list(job.gpus)] = position
        return held

    def block(self, lo: int, hi: int) -> dict[str, np.ndarray]:
        """Each metric of METRICS as a (steps, gpus) float64 array in the store's native units."""
        held = self.job_index(lo, hi)
        busy = held >= 0
        first = np.array([job.first_step for job in self.jobs] + [0], dtype=np.float64)
        started = np.where(busy, np.arange(lo, hi)[:, None] - first[held], 0.0)  # steps since the job started
        noise = np.stack(
            [np.random.default_rng([self.seed, step]).random((4, len(self.gpus))) for step in range(lo, hi)]
        )
        dip = noise[:, 0] < 0.03  # a data-loading or checkpoint pause: utilisation falls for one sample
        util = np.where(busy, np.where(dip, np.floor(noise[:, 1] * 40), 95 + np.floor(noise[:, 1] * 6)), 0.0)
        util = np.minimum(util, 100.0)
        sm = np.where(busy, np.round(util * (0.78 + 0.1 * noise[:, 2]), 1), 0.0)
        tensor = np.round(sm * 0.62, 1)
        power = np.round(np.where(busy, 120 + 5.6 * util + 25 * noise[:, 3], 68 + 4 * noise[:, 3]), 3)
        warm = 1 - np.exp(-started / 30.0)  # about five minutes to the steady state
        temp = np.round(np.where(busy, 34 + warm * (20 + (power - 120) * 0.03), 31 + 2 * noise[:, 2]))
        clock = np.where(busy, np.where(power > 660, 1755.0, 1980.0), 345.0)
        return {
            "util_pct": util,
            "sm_active_pct": sm,
            "tensor_active_pct": tensor,
            "power_w": power,
            "temp_c": temp,
            "sm_clock_mhz": clock,
        }


def make_telemetry(gpus: int = 1024, hours: float = 24, step_s: int = 10, end: float = 0.0, seed: int = 1) -> Telemetry:
    """A fleet of `gpus` (nodes of 8 in racks of 4 nodes) whose last sample is at `end` (0: now)."""
    if gpus % GPUS_PER_NODE:
        raise ValueError(f"gpus must be a multiple of {GPUS_PER_NODE}")
    steps = int(hours * 3600 // step_s)
    last = (end or np.floor(time.time() / step_s) * step_s) // step_s * step_s
    start = float(last - (steps - 1) * step_s)
    ids = tuple(
        GpuId("bench", f"rack-{n // NODES_PER_RACK:02d}", f"node-{n:04d}", g, f"GPU-{n:04d}-{g}")
        for n in range(gpus // GPUS_PER_NODE)
        for g in range(GPUS_PER_NODE)
    )
    return Telemetry(start, step_s, steps, ids, _schedule(len(ids), steps, step_s, seed), seed)


def _schedule(gpus: int, steps: int, step_s: int, seed: int) -> tuple[JobSpan, ...]:
    """Jobs of up to 64 GPUs, one after another on each group of GPUs, 1 to 8 hours long."""
    rng = np.random.default_rng(seed)
    jobs: list[JobSpan] = []
    per_hour = 3600 // step_s
    for group, lo in enumerate(range(0, gpus, GPUS_PER_JOB)):
        members = tuple(range(lo, min(lo + GPUS_PER_JOB, gpus)))
        step = int(rng.integers(0, per_hour))  # the fleet's jobs do not all start together
        while step < steps:
            length = int(rng.integers(per_hour, 8 * per_hour))
            jobs.append(JobSpan(f"{100000 + len(jobs)}", f"user{group % 7}", members, step, min(step + length, steps)))
            step += length + GAP_STEPS
    return tuple(jobs)
