"""spin_dp: synchronous data parallel whose collective waits spin on the GPU (PyTorch DDP over NCCL).

Model (see _dp for the step). Each step every rank computes its forward and backward, then enters the
gradient all-reduce. NCCL's kernel is launched as soon as the rank's gradients are ready and it spins
on the GPU until every peer has contributed: a healthy rank waiting for a straggler shows util ~100%,
SM activity of the few SMs NCCL occupies, no tensor activity and 'spin' power (clocks up, no GEMMs).
Communication/compute 0.05-0.6, 2-64 nodes, jitter and measurement noise 1-5%, scrapes every 1-30 s.

Faults, from the culprit outward:
- thermal / power_cap: one GPU computes slower; it reads MORE tensor activity than its peers (it is the
  one still computing) with a lower clock; every other rank spins longer (tensor down, util unchanged).
- slow_host: the node's GPUs idle before computing (util drops there, not elsewhere); all others spin.
- slow_nic: the ring runs at the slow link's pace; every rank spends longer in the transfer (all look
  alike on the GPU side); the culprit's predecessor (downtrained link) or the culprit (congested port)
  accrues xmit_wait; all ports' bytes/s fall together.
Clean oddities: healthy GPUs at their power limit (0x4 set while computing), a slightly slower die, a
hot slot, a port under an oversubscribed uplink, an exporter outage.
"""

from __future__ import annotations

from gpuscope.bench.workloads import Case
from gpuscope.bench.workloads._dp import build
from gpuscope.bench.workloads._gpu import SPIN

FAMILY = "spin_dp"


def generate(seed: int) -> Case:
    return build(FAMILY, seed, wait_act=SPIN)
