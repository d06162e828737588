"""grad_accum: data parallel with gradient accumulation: k micro-steps of compute (1-16), then one
all-reduce of the accumulated gradients (DDP's no_sync for the first k-1).

Model (see _dp for the step). A rank's k micro-steps (forward, backward, an exposed host gap each) run
back to back with no synchronisation, so a slow GPU falls behind by k times its per-micro-step delay and
the healthy ranks pay it all at once, spinning in NCCL at the end of the cycle. Per-micro-step jitter
averages over k (the clean wait shrinks as 1/sqrt(k)), and the communication is a 1/k share of the
cycle, so a slow NIC must be far slower to cost the same as a slow GPU. Only the last micro-step's
backward can hide communication. The NIC is busy in one burst per cycle: with cycles of several seconds
to tens of seconds and scrapes of 1-30 s, byte and wait counters move in bursts and the DCGM gauges,
read at a phase that drifts against the cycle, alias into slow beats.
Faults propagate as in spin_dp, each scaled by the cycle structure above; step_s is the optimizer step.
"""

from __future__ import annotations

from gpuscope.bench.workloads import Case
from gpuscope.bench.workloads._dp import build
from gpuscope.bench.workloads._gpu import SPIN

FAMILY = "grad_accum"


def generate(seed: int) -> Case:
    return build(FAMILY, seed, wait_act=SPIN, k_range=(1, 16), c0_range=(0.1, 2.0))
