"""Workload families for scoring the straggler detector on physics it was not tuned to.

Each family is a module with `generate(seed) -> Case`: a whole training job as telemetry (what the
exporters would have scraped) plus its ground truth. The families were written from a model of how
synchronous training behaves, independently of `exporter.sim.training` and of the detector:

- `spin_dp`: data parallel, NCCL waits spin on the GPU (waiting ranks read ~100% utilisation);
- `yield_dp`: data parallel whose collectives are negotiated on the CPU (waiting GPUs sit idle);
- `pipeline`: 1F1B pipeline parallel with tensor parallel inside the node, bubbles and unequal stages;
- `grad_accum`: k micro-steps of compute, one all-reduce every k;
- `startup_and_pauses`: data parallel with a realistic start, checkpoints, evaluation and loader stalls;
- `rail`: rail-optimised nodes (one NIC per GPU); a slow NIC slows one rail's ring;
- `moe_fsdp`: mixture of experts with FSDP sharding and expert parallelism: all-to-alls every layer, uneven loads.

Held out until the detector was frozen (`NEW_FAMILIES`), each written by a hand that never read the detector:
- `serving`: inference replicas, independent of each other (nobody waits for anybody): never a straggler;
- `mixed_models`: data parallel over H100 and H200 nodes in one job, the faster GPUs waiting by design;
- `moe_drift`: mixture of experts whose hot experts drift between nodes over minutes;
- `zero3_offload`: ZeRO-3 with optimizer offload to the host: phases where every GPU idles;
- `neighbour`: a job slowed by another job's traffic on shared nodes or switches (a fabric finding);
- `nvlink`: tensor parallel inside the node over NVLink, a degraded link slowing its node's group;
- `elastic`: elastic restarts: the job stops, restarts from a checkpoint, sometimes on fewer nodes.

The shared measurement layer (how a step becomes NVML/DCGM samples and InfiniBand counters) lives in
`_engine` (`_regimes` for a step that changes while the job runs); the GPU's electrical model (clocks,
power limit, thermal limit) in `_gpu`; each family's step model in its own module (`_dp` holds the
data-parallel step that the data-parallel families build on). What the families draw and inject alike is
written once: seeds, job length, fault windows and fleet decoys in `_common`, how a fault enters a step
and its ground-truth record in `_faults`, checkpoints in `_pauses`.

Conventions: sample `i` is taken at `times[i] = (i + 1) * sample_s`; counters and the DCGM profiling
gauges cover `(times[i] - sample_s, times[i]]`; `step_s[i]` is the mean step (iteration) time of the
steps run in that interval, NaN where the interval is mostly a pause (start-up, checkpoint, eval) or an all-rank stall.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from gpuscope.exporter.sim.training import Telemetry

FAMILIES = ("spin_dp", "yield_dp", "pipeline", "grad_accum", "startup_and_pauses", "rail", "moe_fsdp")
NEW_FAMILIES = ("serving", "mixed_models", "moe_drift", "zero3_offload", "neighbour", "nvlink", "elastic")
# gpu_degraded: a GPU slower at normal clocks (memory or link stalls); nvlink: a degraded NVLink of `gpu`;
# fabric: the job slowed by the fabric or by another job (`aggressor`), with no culprit rank inside it.
FAULT_KINDS = ("thermal", "power_cap", "slow_nic", "slow_host", "gpu_degraded", "nvlink", "fabric")
TARGET_SLOWDOWNS = (0.05, 0.1, 0.2, 0.5)
GPU_KEYS = (
    "tensor_active_pct",
    "sm_active_pct",
    "util_pct",
    "power_w",
    "sm_clock_mhz",
    "clock_event_reasons",
    "temp_c",
)
PORT_KEYS = ("xmit_bytes", "xmit_wait", "rate_gbps")
# Optional per-GPU cumulative counters (ranks, T), as NVML reports them (bytes; error counts); a family
# without NVLink leaves them out and readers treat them as missing.
NVLINK_KEYS = ("nvlink_tx_bytes", "nvlink_replay_errors", "nvlink_recovery_errors", "nvlink_crc_errors")


@dataclass(frozen=True)
class GroundTruth:
    kind: str  # one of FAULT_KINDS
    node: int
    gpu: int | None  # local GPU index (thermal, power_cap); None for node-wide faults and NICs
    port: int | None  # row of the port arrays for slow_nic; None otherwise
    onset_s: float  # when the job starts being slowed (a thermal fault's temperature rises before)
    end_s: float
    true_slowdown: float  # mean over the fault of step time / fault-free step time - 1, from the model
    target_slowdown: float = 0.0  # what the seed asked for; true_slowdown is what the physics gave
    localisable: bool = True  # False where no telemetry here can tell the culprit from healthy peers
    detail: str = ""  # the mechanism, e.g. "SW thermal, compute clock 0.81x" or "link 400->100 Gb/s"
    aggressor: str | None = None  # fabric: the job whose traffic slowed this one, where there is one


@dataclass
class Case:
    family: str
    seed: int
    nodes: int
    gpus_per_node: int
    sample_s: float
    duration_s: float
    times: np.ndarray  # (T,)
    telemetry: dict[str, np.ndarray]  # GPU_KEYS -> (ranks, T); PORT_KEYS -> (ports, T)
    port_node: np.ndarray  # (ports,) node of each port
    port_gpu: np.ndarray  # (ports,) local GPU a rail port serves; -1 where one NIC serves the node
    faults: list[GroundTruth]
    step_s: np.ndarray  # (T,)
    clean_step_s: np.ndarray  # (T,)
    decoys: list[str] = field(default_factory=list)
    params: dict[str, object] = field(default_factory=dict)  # the drawn job, for reading results
    # Whether the job's ranks run in lock-step (they wait for each other): False for independent replicas.
    synchronous: bool = True

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def ports(self) -> int:
        return len(self.port_node)

    @property
    def gpu(self) -> dict[str, np.ndarray]:
        return {k: self.telemetry[k] for k in GPU_KEYS}

    @property
    def nic(self) -> dict[str, np.ndarray]:
        return {k: self.telemetry[k] for k in PORT_KEYS}

    def slowdown(self) -> np.ndarray:
        """True job slowdown per interval (0 when healthy, NaN in pauses)."""
        return self.step_s / self.clean_step_s - 1

    def as_telemetry(self) -> Telemetry:
        """The case in the shape of `exporter.sim.training.Telemetry` (its `nic` arrays are per port,
        which is per node except in the `rail` family, where each node has gpus_per_node ports). For the
        simulator's four fault kinds only: its Fault refuses gpu_degraded, nvlink and fabric."""
        from gpuscope.exporter.sim.training import Fault, Telemetry

        faults = [
            Fault(f.kind, f.node, f.gpu, f.onset_s, f.end_s, float(min(5.0, max(f.true_slowdown, 1e-3))))
            for f in self.faults
        ]
        return Telemetry(self.times, self.gpu, self.nic, self.step_s, self.clean_step_s, faults)


def generate(family: str, seed: int) -> Case:
    if family not in FAMILIES + NEW_FAMILIES:
        raise ValueError(f"unknown family {family!r}; one of {FAMILIES + NEW_FAMILIES}")
    module = importlib.import_module(f"{__name__}.{family}")
    case: Case = module.generate(seed)
    return case
