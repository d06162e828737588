"""Two small models of GPU jobs for the straggler detector's principles (issue 37), per 5 s sample:

- `Lockstep`: a synchronous job. A step takes as long as its slowest rank's compute plus the exchange; a
  rank's tensor activity is the work it does per elapsed cycle (so a throttled GPU's share rises with
  its busy time, a stalled one's does not), its SM activity how long it is busy (computing, stalled, or
  spinning in NCCL on a few SMs), its power its idle draw plus the work it does per second; every port
  sends the step's bytes once a step.
- `replicas`: independent inference replicas, one per node, each following a bursty load of its own.

Both give per-rank and per-port arrays (ranks or ports, samples) with the exporters' units; counters
as rates (the detector's input), cumulative where pushed (`cumulative`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpuscope.stragglers.detector import SW_THERMAL_SLOWDOWN

SAMPLE_S = 5.0
WAIT_TICKS_PER_S = 2.5e8  # port_xmit_wait counts 4 ns ticks


@dataclass
class Telemetry:
    t: np.ndarray  # (T,) seconds since the job started
    tensor: np.ndarray  # (R, T) %
    sm: np.ndarray
    power: np.ndarray  # W
    clock: np.ndarray  # MHz
    reasons: np.ndarray  # NVML clock-event reason bits
    util: np.ndarray  # %
    sent: np.ndarray  # (P, T) bytes per second
    wait: np.ndarray  # (P, T) wait ticks per second


@dataclass
class Lockstep:
    """Per rank and sample: `work` (its share of a step's work, 1 normal), `speed` (below 1 at normal
    clocks: stalls), `clock` (below 1: throttled, thermal reason bit set); per step `comm` seconds of
    exchange; per port `waits` (credit-wait seconds per second) and `extra_sent` (another job's bytes
    per second through the port, where a node is shared)."""

    nodes: int = 6
    gpus: int = 4
    duration_s: float = 7200.0
    work: np.ndarray = field(init=False)
    speed: np.ndarray = field(init=False)
    clock: np.ndarray = field(init=False)
    comm: np.ndarray = field(init=False)
    waits: np.ndarray = field(init=False)
    extra_sent: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.t = np.arange(SAMPLE_S, self.duration_s + 1, SAMPLE_S)
        shape = (self.nodes * self.gpus, self.t.size)
        self.work, self.speed, self.clock = np.ones(shape), np.ones(shape), np.ones(shape)
        self.comm = np.full(self.t.size, 0.6)
        self.waits = np.full((self.nodes, self.t.size), 0.002)
        self.extra_sent = np.zeros((self.nodes, self.t.size))

    def between(self, start_s: float, end_s: float) -> np.ndarray:
        return (self.t >= start_s) & (self.t < end_s)

    def telemetry(self, seed: int = 1) -> Telemetry:
        rng = np.random.default_rng(seed)
        busy_s = 2.4 * self.work / (self.speed * self.clock)  # compute (and stalls) per step
        step_s = busy_s.max(axis=0) + self.comm
        noise = lambda shape: rng.normal(1, 0.02, shape)  # noqa: E731
        tensor = 70 * self.work / (self.clock * step_s) * noise(busy_s.shape)
        sm = np.minimum(100, 95 * busy_s / step_s + 15 * (1 - busy_s / step_s)) * noise(busy_s.shape)
        power = (120 + 480 * self.work * self.clock / step_s) * noise(busy_s.shape)
        reasons = np.where(self.clock < 1, float(SW_THERMAL_SLOWDOWN), 0.0)
        sent = 4e9 / step_s * noise(self.waits.shape) + self.extra_sent
        wait = WAIT_TICKS_PER_S * self.waits * noise(self.waits.shape)
        util = np.full(busy_s.shape, 99.0)
        return Telemetry(self.t, tensor, sm, power, 1410 * self.clock, reasons, util, sent, wait)


def replicas(nodes: int = 6, gpus: int = 4, duration_s: float = 7200.0, seed: int = 5) -> Telemetry:
    """Inference replicas, one per node (tensor parallel inside it): each replica's load wanders about
    its own mean (the balancer's share, sessions that stick) with a time constant of minutes, and bursts
    now and then; its GPUs' activity and power follow it; little traffic."""
    rng = np.random.default_rng(seed)
    t = np.arange(SAMPLE_S, duration_s + 1, SAMPLE_S)
    load = np.empty((nodes, t.size))
    mean = np.log(rng.uniform(0.35, 0.7, nodes))
    pull = SAMPLE_S / 300  # back towards its mean over five minutes
    level = mean.copy()
    for i in range(t.size):
        level += pull * (mean - level) + rng.normal(0, 0.25 * np.sqrt(2 * pull), nodes)
        burst = 1 + (rng.random(nodes) < 0.05) * rng.uniform(0.3, 0.8, nodes)
        load[:, i] = np.clip(np.exp(level) * burst, 0, 1)
    per_gpu = np.repeat(load, gpus, axis=0)
    shape = per_gpu.shape
    return Telemetry(
        t,
        tensor=80 * per_gpu,
        sm=90 * per_gpu,
        power=120 + 500 * per_gpu,
        clock=np.full(shape, 1410.0),
        reasons=np.zeros(shape),
        util=np.minimum(100, 110 * per_gpu),
        sent=1e6 * (1 + rng.random((nodes, t.size))),
        wait=np.full((nodes, t.size), 1e3),
    )


def cumulative(rate: np.ndarray) -> np.ndarray:
    """Counter readings from rates per second, as a port reports them at each sample."""
    return np.cumsum(rate * SAMPLE_S, axis=1)
