"""A simulated node: GPUs and InfiniBand ports that behave like an H100 node running the scheduled jobs.

Ranks of a job run synchronous steps: each step lasts as long as the slowest rank's compute plus the
collective, and faster ranks spend the difference spinning in NCCL, which reads as full utilisation
but lower SM/tensor activity and power. Counters (energy, bytes) are integrated between reads, so the
source is deterministic for a given seed and sequence of read times. NVLink (nvlink.py) and the rare
faults (health.py: XIDs, ECC, row remaps) draw from their own random streams, so adding them left every
other reading as it was.

Staged faults, for the demo: a GPU of a pinned job slowed by the schedule (its fan fails first, so it
runs into thermal slowdown and its clocks drop while the other ranks wait for it), an XID incident on
demand, and an InfiniBand port whose link goes down for a few seconds now and then (a flapping cable).
"""

from __future__ import annotations

import math
import uuid

import numpy as np

from gpuscope.exporter.sim.health import Incident, SimGpuHealth
from gpuscope.exporter.sim.jobs import ACCOUNTS, JobRun, JobSchedule
from gpuscope.exporter.sim.nvlink import SimNvLink
from gpuscope.exporter.sim.topology import NodeSpec
from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, JobInfo, PortIdentity, PortReading

MODEL = "NVIDIA H100 80GB HBM3"
FB_TOTAL_BYTES = 81_559 * 2**20
POWER_LIMIT_W = 700.0
IDLE_POWER_W = 70.0
MAX_SM_CLOCK_MHZ = 1980.0
IDLE_SM_CLOCK_MHZ = 345.0
MEM_CLOCK_MHZ = 2619.0
AMBIENT_C = 28.0
THERMAL_C_PER_W = 0.075
THERMAL_TAU_S = 20.0
IB_LINE_RATE_GBPS = 400.0
IB_MAX_BYTES_PER_S = IB_LINE_RATE_GBPS * 1e9 / 8
IB_STATE_ACTIVE = 4.0
IB_STATE_DOWN = 1.0
IB_PHYS_LINK_UP = 5.0
IB_PHYS_POLLING = 2.0
IB_TRAFFIC_SHARE = 0.35  # of line rate, for a multi-node job's gradient exchange at its usual step rate
CLOCK_EVENT_GPU_IDLE = 0x1
CLOCK_EVENT_HW_THERMAL = 0x40
SLOWDOWN_C = 90.0  # the GPU slows itself down here, which holds it a little above
FB_RESERVED_BYTES = 512 * 2**20  # what the driver and firmware keep for themselves on an H100
DRAM_PER_COPY = 0.6  # DRAM bandwidth share per unit of NVML's memory-busy time, as H100s show in training
PCIE_IDLE_BYTES_PER_S = 5e7  # host traffic: data loading and checkpoints come in bursts, this is the floor
PCIE_BUSY_BYTES_PER_S = 1.5e9
DRIVER_VERSION = "570.124.06"  # as NVML words it; the backend's name says this is the simulator
PCI_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
FAN_FAILURE_C = 30.0  # a dead fan: busy at ~600 W, the GPU heads for ~100 C and slows itself at 90
FAN_LEAD_S = 30.0  # the fan fails this long before the clocks drop: the time to heat up to slowdown
IDLE_JOB_FB_SHARE = 0.35  # an idle job still holds its memory (a model loaded in a notebook)


class SimNodeSource:
    """Implements exporter.sources.base.Source for one simulated node."""

    name = "sim"
    driver_version = DRIVER_VERSION

    def __init__(self, node: NodeSpec, schedule: JobSchedule, seed: int) -> None:
        self.node = node
        self.schedule = schedule
        self._seed = seed
        self._rng = np.random.default_rng([seed, node.index, 0x51])
        self.gpus = tuple(_gpu_identity(seed, node, i) for i in range(node.gpus))
        self.ports = tuple(PortIdentity(device=f"mlx5_{i}", port=1) for i in range(node.ib_ports))
        self._last_t: float | None = None
        self._temp = np.full(node.gpus, AMBIENT_C + THERMAL_C_PER_W * IDLE_POWER_W)
        self._energy_j = self._rng.uniform(1e6, 5e7, node.gpus)  # driver loaded a while ago
        self._ib = {key: np.zeros(node.ib_ports) for key in ("xmit_bytes", "rcv_bytes", "xmit_wait")}
        self._cooling_loss_c = np.zeros(node.gpus)
        # Seconds the clocks were held down, as NVML's violation counters count them (since driver load).
        self._throttled_power_s = np.zeros(node.gpus)
        self._throttled_thermal_s = np.zeros(node.gpus)
        self._nvlink = SimNvLink(seed, node.index, node.gpus)
        self._health = SimGpuHealth(seed, node.index, node.gpus)
        self._clock_factor = np.ones(node.gpus)  # < 1 on a GPU slowed by a staged fault
        self._slowdown = 1.0  # how much longer the current job's steps take than usual
        self._flaps: dict[int, tuple[float, float, float]] = {}  # port -> (since, every_s, down_s)
        self._ib_errors = {key: np.zeros(node.ib_ports) for key in ("symbol_errors", "link_downed", "recovery")}
        self._port_down = np.zeros(node.ib_ports, dtype=bool)
        self._due_incidents: list[tuple[float, int, Incident]] = []

    def fail_cooling(self, gpu: int, degrees: float) -> None:
        """Fault injection: GPU `gpu` runs `degrees` hotter from now on (0 repairs it). A dead fan is a
        step, not a ramp: the offset applies at once, to the steady state and the current reading."""
        self._temp[gpu] += degrees - self._cooling_loss_c[gpu]
        self._cooling_loss_c[gpu] = degrees

    def inject_xid(self, at: float, gpu: int, xids: tuple[int, ...], uncorrectable: bool = False) -> None:
        """Fault injection: at time `at`, the driver logs `xids` on GPU `gpu` (with an uncorrectable ECC
        error and its row remap pending, if `uncorrectable`). Applied by the first read at or after `at`,
        in the sampling thread, so readings never see half an incident."""
        self._due_incidents.append((at, gpu, Incident(0.0, xids, uncorrectable=uncorrectable)))

    def flap_port(self, port: int, since: float, every_s: float = 90.0, down_s: float = 6.0) -> None:
        """Fault injection: from `since`, port `port`'s link drops for `down_s` every `every_s` seconds
        and retrains, counting a link-down, a recovery and a burst of symbol errors each time."""
        if not 0 < down_s < every_s:
            raise ValueError("a flapping link must be down for less than its period")
        self._flaps[port] = (since, every_s, down_s)

    def read(self, now: float) -> tuple[tuple[GpuReading, ...], tuple[PortReading, ...]]:
        dt = 0.0 if self._last_t is None else max(0.0, now - self._last_t)
        self._last_t = now
        job = self.schedule.job_at(self.node.index, now)
        running = job if job is not None and not job.idle else None
        self._stage_fan_failure(running, now)
        busy = self._compute_fraction(running, now) if running else None
        link_faults = self._health.advance(job is not None, dt)
        for due in [d for d in self._due_incidents if d[0] <= now]:
            self._due_incidents.remove(due)
            self._health.record(due[1], due[2])
        self._nvlink.advance(running, busy, dt, link_faults)
        gpus = self._read_gpus(running, busy, dt, holding=job is not None)
        ports = self._read_ports(running, busy, dt, now)
        return gpus, ports

    def _stage_fan_failure(self, job: JobRun | None, now: float) -> None:
        fault = self.schedule.slow_gpu_of(job, now + FAN_LEAD_S) if job else None
        if fault is not None and fault.node == self.node.index and self._cooling_loss_c[fault.gpu] == 0:
            self.fail_cooling(fault.gpu, FAN_FAILURE_C)

    def close(self) -> None:
        pass

    def _compute_fraction(self, job: JobRun, now: float) -> np.ndarray:
        """Per-GPU share of each step spent computing; the rest is waiting in the collective."""
        position = job.nodes.index(self.node.index)
        is_last_stage = position == job.ranks - 1
        role = np.full(self.node.gpus, job.heavy_rank_extra if is_last_stage else 0.0)
        compute = job.step_seconds * (1.0 + role) * (1.0 + self._rng.normal(0.0, 0.006, self.node.gpus))
        collective = job.step_seconds * (0.15 if job.ranks > 1 else 0.05)
        # Every rank waits for the slowest; the step jitter is shared so all nodes agree on it.
        step_jitter = 1.0 + 0.02 * _unit_hash(job.job_id, math.floor(now))
        step = job.step_seconds * (1.0 + job.heavy_rank_extra) * 1.02 * step_jitter + collective
        self._clock_factor = np.ones(self.node.gpus)
        fault = self.schedule.slow_gpu_of(job, now)
        self._slowdown = 1.0 + (fault.severity if fault else 0.0)
        if fault is not None:
            step *= self._slowdown  # the slow GPU computes for the whole step, then exchanges
            if fault.node == self.node.index:
                slowed = step - collective
                self._clock_factor[fault.gpu] = compute[fault.gpu] / slowed
                compute[fault.gpu] = slowed
        return np.clip(compute / step, 0.0, 1.0)

    def _read_gpus(
        self, job: JobRun | None, busy: np.ndarray | None, dt: float, holding: bool
    ) -> tuple[GpuReading, ...]:
        n = self.node.gpus
        noise = self._rng.normal(0.0, 1.0, (6, n))
        if job is None or busy is None:
            util = np.zeros(n)
            sm_active = np.zeros(n)
            tensor = np.zeros(n)
            mem_copy = np.zeros(n)
            power = IDLE_POWER_W + 2.0 * noise[0]
            sm_clock = np.full(n, IDLE_SM_CLOCK_MHZ)
            fb_used = np.full(n, IDLE_JOB_FB_SHARE * FB_TOTAL_BYTES if holding else 4.0 * 2**20)
            reasons = CLOCK_EVENT_GPU_IDLE
        else:
            util = np.clip(98.5 + 1.0 * noise[1], 90.0, 100.0)
            sm_active = 100 * (0.92 * busy + 0.35 * (1 - busy)) * (0.9 + 0.1 * job.intensity) + noise[2]
            tensor = 100 * 0.7 * job.intensity * busy + noise[3]
            mem_copy = 35 * busy * job.intensity + noise[4]
            power = IDLE_POWER_W + (POWER_LIMIT_W - IDLE_POWER_W) * (0.25 + 0.7 * job.intensity * busy)
            power = power + 6.0 * noise[0]
            sm_clock = MAX_SM_CLOCK_MHZ * self._clock_factor - np.abs(15.0 * noise[5])
            fb_used = np.full(n, (0.72 + 0.2 * _unit_hash(job.job_id, 0) ** 2) * FB_TOTAL_BYTES)
            reasons = 0
        power = np.clip(power, 20.0, POWER_LIMIT_W)
        steady = AMBIENT_C + THERMAL_C_PER_W * power + self._cooling_loss_c
        self._temp = steady + (self._temp - steady) * math.exp(-dt / THERMAL_TAU_S)
        self._energy_j = self._energy_j + power * dt
        at_limit = power >= POWER_LIMIT_W
        hot = self._temp >= SLOWDOWN_C
        self._throttled_power_s = self._throttled_power_s + np.where(at_limit, dt, 0.0)
        self._throttled_thermal_s = self._throttled_thermal_s + np.where(hot, dt, 0.0)
        load = 0.0 if job is None or busy is None else job.intensity * (1.0 - busy)  # host traffic between steps
        pcie = (PCIE_IDLE_BYTES_PER_S + PCIE_BUSY_BYTES_PER_S * np.broadcast_to(load, (n,))).tolist()
        readings = []
        nvlink = self._nvlink.readings()
        health = self._health.values()
        for i, gpu in enumerate(self.gpus):
            nvlink_totals, links = nvlink[i]
            values = {
                "util_pct": round(float(np.clip(util[i], 0, 100))),
                "mem_copy_util_pct": round(float(np.clip(mem_copy[i], 0, 100))),
                "sm_active_pct": float(np.clip(sm_active[i], 0, 100)),
                "tensor_active_pct": float(np.clip(tensor[i], 0, 100)),
                "fb_used_bytes": float(fb_used[i]),
                "fb_total_bytes": float(FB_TOTAL_BYTES),
                "temp_c": round(min(float(self._temp[i]), SLOWDOWN_C + 2.0)),
                "mem_temp_c": round(min(float(self._temp[i]), SLOWDOWN_C + 2.0) + 5.0),
                "power_w": float(power[i]),
                "power_limit_w": POWER_LIMIT_W,
                "energy_j": float(self._energy_j[i]),
                "sm_clock_mhz": round(float(sm_clock[i])),
                "mem_clock_mhz": MEM_CLOCK_MHZ,
                "clock_event_reasons": float(reasons | (CLOCK_EVENT_HW_THERMAL if self._temp[i] >= SLOWDOWN_C else 0)),
                "pcie_replay": 0.0,
                # Training runs no video; the graphics/compute engine is busy whenever a kernel runs.
                "enc_util_pct": 0.0,
                "dec_util_pct": 0.0,
                "fb_reserved_bytes": float(FB_RESERVED_BYTES),
                "gr_engine_active_pct": float(np.clip(util[i], 0, 100)),
                "dram_active_pct": float(np.clip(DRAM_PER_COPY * mem_copy[i], 0, 100)),
                "pcie_tx_bytes_per_s": pcie[i],
                "pcie_rx_bytes_per_s": pcie[i],
                "vgpu_licensed": 0.0,  # bare metal: not a vGPU
                "throttle_power_s": float(self._throttled_power_s[i]),
                "throttle_thermal_s": float(self._throttled_thermal_s[i]),
                **health[i],
                **nvlink_totals,
            }
            xids = self._health.xid_counts(i)
            readings.append(GpuReading(gpu=gpu, up=True, values=values, links=links, xid_counts=xids))
        return tuple(readings)

    def _read_ports(
        self, job: JobRun | None, busy: np.ndarray | None, dt: float, now: float
    ) -> tuple[PortReading, ...]:
        n = self.node.ib_ports
        if n == 0:
            return ()
        if job is not None and busy is not None and job.ranks > 1:
            # The same gradients every step: a job slowed down sends fewer bytes per second.
            share = IB_TRAFFIC_SHARE / self._slowdown
            rate = IB_MAX_BYTES_PER_S * np.clip(share + self._rng.normal(0, 0.02, n), 0.0, 0.95)
        else:
            rate = np.full(n, 2e6)  # background storage and control traffic
        down = self._flapping_down(now)
        rate = np.where(down, 0.0, rate)
        self._ib["xmit_bytes"] += rate * dt
        self._ib["rcv_bytes"] += rate * dt * 0.98
        self._ib["xmit_wait"] += (rate / IB_MAX_BYTES_PER_S) * 5e4 * dt
        readings = []
        for i, port in enumerate(self.ports):
            xmit = math.floor(self._ib["xmit_bytes"][i] / 4) * 4  # sysfs counts 4-byte words
            rcv = math.floor(self._ib["rcv_bytes"][i] / 4) * 4
            values = {
                "xmit_bytes": float(xmit),
                "rcv_bytes": float(rcv),
                "xmit_packets": float(xmit // 4096),
                "rcv_packets": float(rcv // 4096),
                "xmit_wait": float(math.floor(self._ib["xmit_wait"][i])),
                "symbol_errors": float(self._ib_errors["symbol_errors"][i]),
                "link_downed": float(self._ib_errors["link_downed"][i]),
                "rcv_errors": 0.0,
                "state": IB_STATE_DOWN if down[i] else IB_STATE_ACTIVE,
                "phys_state": IB_PHYS_POLLING if down[i] else IB_PHYS_LINK_UP,
                "link_error_recovery": float(self._ib_errors["recovery"][i]),
                "xmit_discards": 0.0,
                "rate_gbps": IB_LINE_RATE_GBPS,
            }
            readings.append(PortReading(port=port, values=values))
        return tuple(readings)

    def _flapping_down(self, now: float) -> np.ndarray:
        """Which ports are down now; counts each drop (link downed, a recovery, symbol errors)."""
        down = np.zeros(self.node.ib_ports, dtype=bool)
        for port, (since, every_s, down_s) in self._flaps.items():
            down[port] = now >= since and (now - since) % every_s < down_s
        dropped = down & ~self._port_down
        self._ib_errors["link_downed"] += dropped
        self._ib_errors["recovery"] += dropped
        if dropped.any():  # drawn only then: a node without a flapping port keeps its random stream
            self._ib_errors["symbol_errors"] += np.where(dropped, self._rng.integers(20, 200, self.node.ib_ports), 0)
        self._port_down = down
        return down


class SimJobs:
    """Job attribution for a simulated node, straight from the schedule (implements JobSource)."""

    def __init__(self, node: NodeSpec, schedule: JobSchedule) -> None:
        self._node = node
        self._schedule = schedule

    def assign(self, gpus: tuple[GpuIdentity, ...], now: float) -> dict[int, JobInfo]:
        job = self._schedule.job_at(self._node.index, now)
        if job is None:
            return {}
        info = JobInfo(job.job_id, job.user, account=ACCOUNTS.get(job.user), partition="gpu")
        return {gpu.index: info for gpu in gpus}


def _gpu_identity(seed: int, node: NodeSpec, index: int) -> GpuIdentity:
    rng = np.random.default_rng([seed, node.index, index, 0x1D])
    gpu_uuid = uuid.UUID(bytes=rng.bytes(16), version=4)
    bus = PCI_BUSES[index % len(PCI_BUSES)] + 0x100 * (index // len(PCI_BUSES))
    serial = f"{gpu_uuid.int % 10**13:013d}"  # 13 digits, as NVIDIA boards print theirs
    return GpuIdentity(
        index=index, uuid=f"GPU-{gpu_uuid}", model=MODEL, pci_bus_id=f"00000000:{bus:02X}:00.0", serial=serial
    )


def _unit_hash(job_id: str, tick: int) -> float:
    """A deterministic number in [-1, 1) shared by every node of a job for the same tick."""
    rng = np.random.default_rng([int(job_id), tick & 0xFFFFFFFF])
    return float(rng.uniform(-1.0, 1.0))
