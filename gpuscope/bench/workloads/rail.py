"""rail: data parallel on rail-optimised nodes, one NIC per GPU (port_gpu names it).

Model (see _dp for the step). NCCL reduces inside the node over NVLink, then runs gpus_per_node
all-reduces in parallel, one per rail (GPU i of every node, NIC i, leaf switch i), each carrying
1/gpus_per_node of the gradient, then gathers over NVLink again. The step needs every rail's ring to
finish, so one slow NIC sets the pace of its whole rail and, through the final gather, of every GPU.
Healthy waiting ranks spin in NCCL as in spin_dp.

Faults:
- slow_nic (half the faulty seeds): on the GPU side every rank just spends longer in the transfer (the
  culprit's GPU looks like all the others); on the NIC side the other rails finish early and idle, the
  slow rail's ports all run at the slow link's pace, and xmit_wait rises on the culprit (congested) or
  on the port that feeds it on the same rail (a link trained at a lower rate, whose rate_gbps drops).
  Ground truth names the port.
- thermal, power_cap, slow_host: as in spin_dp; every port's bytes/s fall together.
"""

from __future__ import annotations

from gpuscope.bench.workloads import Case
from gpuscope.bench.workloads._dp import build
from gpuscope.bench.workloads._gpu import SPIN

FAMILY = "rail"


def generate(seed: int) -> Case:
    return build(
        FAMILY,
        seed,
        wait_act=SPIN,
        rails=True,
        weights={"thermal": 1 / 6, "power_cap": 1 / 6, "slow_nic": 1 / 2, "slow_host": 1 / 6},
    )
