"""yield_dp: synchronous data parallel whose waits happen on the CPU (Horovod-style negotiation).

Model (see _dp for the step). Ranks announce ready gradients to a coordinator; the NCCL all-reduce is
launched only once every rank is ready, so a rank that finished early has no kernel to spin in: its
GPU sits idle (util falls, SM and tensor activity zero, idle power with clocks still up) until the
slowest rank arrives, then all of them run the transfer together.

Faults, from the culprit outward:
- thermal / power_cap: the slow GPU keeps computing (util stays high, lower clock, more tensor time) while
  every healthy GPU's utilisation drops by the wait: here, the straggler is the one that looks busiest.
- slow_host: the node's GPUs idle before computing, the others idle after it: both idle the same time per
  step, so no GPU counter tells the starved node from the rest (ground truth says localisable=False);
  the job's step time and every GPU's utilisation drop together, like a job-wide input stall.
- slow_nic: as in spin_dp, only the NIC counters tell which port.
"""

from __future__ import annotations

from gpuscope.bench.workloads import Case
from gpuscope.bench.workloads._dp import build
from gpuscope.bench.workloads._gpu import IDLE

FAMILY = "yield_dp"


def generate(seed: int) -> Case:
    return build(FAMILY, seed, wait_act=IDLE)
