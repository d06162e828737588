"""A synchronous data-parallel training job as telemetry, with injected faults and their ground truth.

Every step, each rank computes, then all ranks exchange gradients: the step lasts as long as the
slowest rank. Ranks that finish early wait inside NCCL kernels, which spin: their utilisation stays
near 100% while their tensor activity and power drop. That is why utilisation cannot find a straggler
and why this model exists (REFERENCE.md section 5). Each sample averages the steps of one sampling
interval.

Also modelled: a permanently heavier last pipeline stage (a role, not a fault), checkpoint pauses where
all ranks stop together, 1-2% diurnal drift of the step time, measurement noise and dropped samples.

Faults, each with the job slowdown it causes while active (`severity`, e.g. 0.2 = steps 20% longer):
- thermal: one GPU's clocks drop (HW thermal slowdown bit), so it computes slower;
- power_cap: one GPU is held at a lower power limit (SW power cap bit), clocks and power drop;
- slow_nic: one node's link runs at a lower rate, its gradient exchange takes longer, transmit waits rise;
- slow_host: one node's input pipeline stalls its GPUs between steps (idle, not in NCCL).
Everything is a pure function of the job, the faults and the seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

HW_THERMAL_SLOWDOWN = 0x40  # NVML clock event reason bits
SW_POWER_CAP = 0x4
FAULT_KINDS = ("thermal", "power_cap", "slow_nic", "slow_host")
BASE_CLOCK_MHZ = 1980.0
IDLE_W, BUSY_W, WAIT_W = 90.0, 640.0, 230.0  # power when idle, computing, spinning in NCCL
LINK_GBPS = 400.0


@dataclass(frozen=True)
class Fault:
    kind: str  # one of FAULT_KINDS
    node: int  # position of the node in the job
    gpu: int | None  # local GPU index for thermal and power_cap; None for node-wide faults
    onset_s: float  # seconds from the job's start
    end_s: float
    severity: float  # job step time increase while active: 0.05, 0.1, 0.2, 0.5

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; one of {FAULT_KINDS}")
        node_wide = self.kind in ("slow_nic", "slow_host")
        if node_wide and self.gpu is not None:
            raise ValueError(f"{self.kind} faults are node-wide: no GPU")
        if not node_wide and self.gpu is None:
            raise ValueError(f"{self.kind} faults need a GPU")
        if not 0 < self.severity <= 5 or self.end_s <= self.onset_s:
            raise ValueError("severity must be in (0, 5] and the fault must end after it starts")


@dataclass(frozen=True)
class TrainingJob:
    nodes: int = 4
    gpus_per_node: int = 8
    step_s: float = 1.2  # clean step time of the slowest (last pipeline stage) ranks
    comm_fraction: float = 0.25  # share of a clean step spent exchanging gradients
    last_stage_extra: float = 0.12  # the last node's GPUs compute this much longer, always
    checkpoint_every_s: float = 1800.0
    checkpoint_s: float = 40.0
    drift: float = 0.015  # diurnal amplitude of the step time
    noise: float = 0.02  # relative measurement noise
    drop_rate: float = 0.01  # samples that never arrive
    seed: int = 0

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass
class Telemetry:
    times: np.ndarray  # (T,) seconds from the job's start, one per sample
    gpu: dict[str, np.ndarray]  # catalog key -> (ranks, T); NaN where a sample was dropped
    nic: dict[str, np.ndarray]  # catalog key -> (nodes, T): xmit_bytes and xmit_wait as counters
    step_s: np.ndarray  # (T,) true mean step time in each interval (NaN during checkpoints)
    clean_step_s: np.ndarray  # (T,) what it would have been without faults
    faults: list[Fault] = field(default_factory=list)

    def slowdown(self) -> np.ndarray:
        """True job slowdown per interval (0 when healthy), the ground truth a detector is scored on."""
        return self.step_s / self.clean_step_s - 1


def simulate(job: TrainingJob, faults: list[Fault], duration_s: float, sample_s: float = 5.0) -> Telemetry:
    rng = np.random.default_rng(job.seed)
    times = np.arange(0.0, duration_s, sample_s)
    n_t, ranks, per_node = len(times), job.ranks, job.gpus_per_node
    node_of = np.arange(ranks) // per_node

    # Clean per-rank compute and communication time per step, with drift common to all ranks.
    comm = job.step_s * job.comm_fraction
    heavy = np.where(node_of == job.nodes - 1, 1.0, 1.0 / (1.0 + job.last_stage_extra))
    compute = (job.step_s - comm) * heavy[:, None] * np.ones((1, n_t))
    phase = rng.uniform(0, 2 * np.pi)
    drift = 1 + job.drift * np.sin(2 * np.pi * times / 86400.0 + phase)
    compute *= drift
    comm_t = np.full((ranks, n_t), comm) * drift
    clean_step = (compute + comm_t).max(axis=0)

    idle = np.zeros((ranks, n_t))  # host stalls: GPU idle, not in a kernel
    clock = np.full((ranks, n_t), BASE_CLOCK_MHZ)
    power_cap = np.full((ranks, n_t), np.inf)
    reasons = np.zeros((ranks, n_t), dtype=np.int64)
    link = np.full((job.nodes, n_t), LINK_GBPS)
    for fault in faults:
        active = (times >= fault.onset_s) & (times < fault.end_s)
        target = clean_step[active] * (1 + fault.severity)  # the step time this fault imposes
        if fault.kind in ("thermal", "power_cap"):
            rank = fault.node * per_node + (fault.gpu or 0)
            factor = (target - comm_t[rank, active]) / compute[rank, active]
            compute[rank, active] *= factor
            clock[rank, active] = BASE_CLOCK_MHZ / factor
            if fault.kind == "thermal":
                reasons[rank, active] |= HW_THERMAL_SLOWDOWN
            else:
                reasons[rank, active] |= SW_POWER_CAP
                power_cap[rank, active] = BUSY_W / factor**0.5
        elif fault.kind == "slow_nic":
            ranks_on = node_of == fault.node
            factor = (target - compute[ranks_on][:, active].max(axis=0)) / comm_t[ranks_on][:, active].max(axis=0)
            comm_t[np.ix_(ranks_on, active)] *= factor
            link[fault.node, active] = LINK_GBPS / factor
        else:  # slow_host: the node's GPUs wait for input before computing
            ranks_on = node_of == fault.node
            stall = target - (compute[ranks_on][:, active] + comm_t[ranks_on][:, active]).max(axis=0)
            idle[np.ix_(ranks_on, active)] = np.maximum(stall, 0)

    step = (idle + compute + comm_t).max(axis=0)  # synchronous: everyone waits for the slowest
    busy = compute / step  # fraction of each interval computing
    stalled = idle / step
    waiting = 1 - busy - stalled  # in NCCL: exchanging, or spinning until the slowest arrives

    checkpoint = (times % job.checkpoint_every_s) >= job.checkpoint_every_s - job.checkpoint_s
    checkpoint &= times >= job.checkpoint_every_s  # none before the first period ends
    busy[:, checkpoint] = stalled[:, checkpoint] = waiting[:, checkpoint] = 0
    running = ~checkpoint

    def noisy(values: np.ndarray) -> np.ndarray:
        return values * (1 + job.noise * rng.standard_normal(values.shape))

    power = np.minimum(IDLE_W + (BUSY_W - IDLE_W) * busy + (WAIT_W - IDLE_W) * waiting, power_cap)
    gpu = {
        "util_pct": np.clip(noisy(100 * (busy + waiting)), 0, 100),
        "sm_active_pct": np.clip(noisy(85 * busy + 25 * waiting), 0, 100),
        "tensor_active_pct": np.clip(noisy(62 * busy), 0, 100),
        "power_w": noisy(power),
        "sm_clock_mhz": np.where(running, clock, 210.0),
        "temp_c": noisy(45 + 30 * busy + 8 * waiting + 25 * ((reasons & HW_THERMAL_SLOWDOWN) > 0)),
        "clock_event_reasons": reasons.astype(np.float64),
    }
    # Each node sends its share of the gradients every step: bytes per second follow the step rate.
    grad_bytes = 2.0e9 * per_node
    rate = np.where(running, grad_bytes / step, 0.0)
    wait_rate = np.where(running, 1e6 * (LINK_GBPS / link - 1), 0.0)  # credits run out on a slow link
    nic = {
        "xmit_bytes": np.cumsum(np.broadcast_to(rate, (job.nodes, n_t)) * sample_s, axis=1),
        "xmit_wait": np.cumsum(noisy(np.abs(wait_rate) + 1e4) * sample_s, axis=1),
        "rate_gbps": link,
    }
    dropped = rng.random((ranks, n_t)) < job.drop_rate
    for values in gpu.values():
        values[dropped] = np.nan
    step_out = np.where(running, step, np.nan)
    return Telemetry(times, gpu, nic, step_out, np.where(running, clean_step, np.nan), list(faults))
