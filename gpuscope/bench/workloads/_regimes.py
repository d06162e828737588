"""A job whose step changes while it runs: a sequence of regimes, each measured by `_engine`.

`_engine.render` takes one clean step and one faulty step for the whole job. Some jobs change their step
as they go (a mixture of experts whose hot experts drift from rank to rank, a host whose optimizer phase
slows while checkpoints are flushed), and a fault's cost then depends on when it strikes: a slower GPU
costs little while its experts are cold and a lot while they are hot. Here the job is cut into regimes,
stretches aligned to the sample grid, each with its own clean step and, where the fault is on, its own
faulty step. Everything else is measured exactly as in `_engine` (its windows, noise, temperature lag,
counters and dropped samples), each sample within the regime of its interval.

Steps jitter, so the phase of the step at a read wanders from sample to sample (`phase_jitter`) rather
than strobing at one phase when the scrape interval is near a multiple of the step.

A fault may also change what a GPU's activities read (`fault_fleet`): a GPU stalled on its memory spends
more time in the same kernels, so its tensor pipes are busy a smaller share of its compute time.
"""

from __future__ import annotations

import numpy as np

from gpuscope.bench.workloads import Case
from gpuscope.bench.workloads._engine import Job, Regime, render_steps
from gpuscope.bench.workloads._gpu import Fleet

__all__ = ["Regime", "regime_edges", "render_regimes"]


def regime_edges(duration_s: float, sample_s: float, every_s: float) -> np.ndarray:
    """Regime starts every ~every_s seconds on the sample grid, from 0."""
    step = max(1, round(every_s / sample_s)) * sample_s
    return np.arange(0.0, duration_s, step)


def render_regimes(
    job: Job, regimes: list[Regime], fault_fleet: Fleet | None = None, phase_jitter: float = 0.0
) -> Case:
    """Render `job` (its clean/faulty plans are ignored) with the step of each regime in turn; fault_fleet:
    what the GPUs' activities read while the fault is on, where it changes that."""
    job.fleet_fault = fault_fleet
    return render_steps(job, regimes, phase_jitter, clip_sent=True)
