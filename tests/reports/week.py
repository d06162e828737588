"""A simulated week of a small fleet, built from the physics up, and what its usage report must say.

Each GPU's activity is piecewise constant in continuous time (phases); power follows utilisation, and the
board's energy counter is the exact integral of that power. Jobs start and end at arbitrary seconds, not on
the sample grid, as real ones do. The exporter's view is then taken the way an exporter takes it: one
instantaneous reading per GPU every STEP seconds, naming the job holding the GPU at that instant.

The expected figures ("truth") are integrals over the continuous schedule, never over the samples, so
they are independent of how the collector buckets, attributes or integrates samples. What sampling can
legitimately change is bounded per allocation, per idle run and per step of a signal (`Allocation.*_tol_*`,
reasoning in its docstring).

Fleet: node 0, four H100s reporting SM and tensor activity (DCGM profiling), GPU 1's energy counter
restarts once (a driver reload) in an hour its longest job holds throughout; node 1, four A100s reporting
utilisation only (NVML, no profiling metrics: "active" falls back to utilisation), GPU 3 with no energy
counter (power only).
Four users in three accounts, two partitions. Job profiles, each applied to every GPU of the job:

- busy: utilisation 90-100 %, SM 60-80 %, in chunks of 5-30 minutes;
- idle_stretch: busy with one stretch of 45-90 minutes at utilisation 0 (idle);
- pauses: busy with three 10-minute pauses and one pair of 20-minute pauses 4 busy minutes apart (none is
  idle: each run is under 30 minutes, and the pair must not be merged into one 44-minute run);
- starts_idle: the first 40-60 minutes at utilisation 0 (staging data), then busy;
- ends_idle: the last 60-120 minutes at utilisation 0 (a hung job, killed at its time limit);
- trickle: busy with 60 minutes at utilisation 6-9 % (slow, but not idle: 5 % is the line) and 50
  minutes at 2-4 % (idle although not 0).
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

STEP = 60.0  # seconds between samples
DAYS = 7
MINUTE = 60.0
HOUR = 3600.0
P_IDLE, P_BUSY = 80.0, 600.0  # W at utilisation 0 and 100
IDLE_UTIL = 5.0  # utilisation under this is idle...
IDLE_RUN = 30 * MINUTE  # ...in runs at least this long
GIB = 2**30

MODELS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB")
USERS = {"alice": "physics", "bob": "physics", "carol": "chem", "dave": "bio"}
PROFILES = ("busy", "idle_stretch", "pauses", "starts_idle", "ends_idle", "trickle")
COUNTERLESS = (1, 3)  # (node, GPU) with no energy counter
RESTARTING = (0, 1)  # (node, GPU) whose counter restarts once
RESTART_AFTER_READING = 5.0  # s: the restart comes this soon after a reading
NO_SM_NODE = 1  # the node whose GPUs report utilisation only


def power(util: float) -> float:
    return P_IDLE + (P_BUSY - P_IDLE) * util / 100.0


@dataclass(frozen=True)
class Phase:
    """One GPU doing one thing from `start` to `end` (seconds since the epoch)."""

    start: float
    end: float
    util: float
    sm: float
    tensor: float
    fb: int


@dataclass
class Job:
    id: str
    user: str
    account: str
    partition: str
    node: int
    gpus: tuple[int, ...]
    start: float
    end: float
    profile: str


@dataclass
class Gpu:
    node: int
    index: int
    phases: list[Phase] = field(default_factory=list)
    has_counter: bool = True
    has_sm: bool = True
    counter_offset: float = 0.0  # joules on the counter at the week's start (the driver loaded long before)
    restart_at: float | None = None  # the counter starts again from 0 here

    # Filled by freeze(): phase bounds and per-phase values as arrays, and the energy up to each bound.
    bounds: np.ndarray = field(default_factory=lambda: np.zeros(0))
    values: dict[str, np.ndarray] = field(default_factory=dict)
    energy_at_bounds: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def freeze(self) -> None:
        starts = [p.start for p in self.phases]
        assert all(a.end == b.start for a, b in zip(self.phases, self.phases[1:], strict=False)), (
            "phases not contiguous"
        )
        self.bounds = np.array([*starts, self.phases[-1].end])
        self.values = {
            "util": np.array([p.util for p in self.phases]),
            "sm": np.array([p.sm for p in self.phases]),
            "tensor": np.array([p.tensor for p in self.phases]),
            "fb": np.array([p.fb for p in self.phases], dtype=np.int64),
        }
        self.values["power"] = P_IDLE + (P_BUSY - P_IDLE) * self.values["util"] / 100.0
        # "active" as the report defines it: SM activity where the GPU reports it, else utilisation.
        self.values["active"] = (self.values["sm"] if self.has_sm else self.values["util"]) / 100.0
        self.energy_at_bounds = np.concatenate(([0.0], np.cumsum(self.values["power"] * np.diff(self.bounds))))

    def at(self, key: str, ts: np.ndarray) -> np.ndarray:
        return self.values[key][np.searchsorted(self.bounds, ts, side="right") - 1]

    def integral(self, key: str, lo: float, hi: float) -> float:
        """The exact integral of a signal from `lo` to `hi` (signal units x seconds)."""
        total = 0.0
        for p, v in zip(self.phases, self.values[key], strict=True):
            overlap = min(hi, p.end) - max(lo, p.start)
            if overlap > 0:
                total += overlap * float(v)
        return total

    def energy(self, ts: np.ndarray) -> np.ndarray:
        """Joules used since the week's start, exactly, at each time."""
        i = np.searchsorted(self.bounds, ts, side="right") - 1
        return self.energy_at_bounds[i] + self.values["power"][i] * (ts - self.bounds[i])

    def counter(self, ts: np.ndarray) -> np.ndarray:
        """What the board's counter reads: the offset plus the energy, or after a restart the energy since it."""
        used = self.energy(ts)
        if self.restart_at is None:
            return self.counter_offset + used
        at_restart = float(self.energy(np.array([self.restart_at]))[0])
        return np.where(ts < self.restart_at, self.counter_offset + used, used - at_restart)

    def steps(self, key: str, lo: float, hi: float) -> float:
        """The sum of |jumps| of a signal strictly inside (lo, hi)."""
        inside = (self.bounds[1:-1] > lo) & (self.bounds[1:-1] < hi)
        return float(np.abs(np.diff(self.values[key]))[inside].sum())


@dataclass(frozen=True)
class Allocation:
    """One GPU held by one job, with the exact figures and how far sampling may move each.

    Tolerances, with samples every STEP seconds:
    - allocated: the collector opens an allocation at the first sample naming the job and closes it at the
      first sample naming another job or none (docs/ingest-format.md, Jobs). Both ends are thus late by
      0 to STEP, so the observed length is within STEP of the true one: one sample interval per allocation.
    - energy, with a counter: the counter is exact; what moves is where each interval's growth is put. The
      ends are placed as above, and however the report spreads an interval's growth over time, it does so
      alike at both ends (both fall on readings, at the same offset in the minute), so what one end takes
      from outside the allocation the other leaves out, to within one interval: STEP x P_BUSY per
      allocation. Plus, at a counter restart, the energy used between the last reading before it and the
      restart, which no reading ever shows (the new value counts as energy since the restart): at most
      STEP x P_BUSY.
    - energy, power only (mean power x time): each reading stands for about one interval, so near each end
      up to STEP of time may be valued at the wrong power (2 x STEP x P_BUSY per allocation, the ends'
      shift and the reading taken on the other side of the end), and near each step of power up to STEP
      of time may be valued at the power on the other side: STEP x |step|.
    - active: as power-only energy, with the activity fraction (at most 1) in place of power.
    - idle: each end of an idle run is seen within one sample interval: 2 x STEP per run (no run here
      is within a few minutes of the 30-minute line, so sampling cannot turn a run in or out).
    """

    job: Job
    gpu: Gpu

    @property
    def start(self) -> float:
        return self.job.start

    @property
    def end(self) -> float:
        return self.job.end

    @property
    def allocated_s(self) -> float:
        return self.end - self.start

    def idle_runs(self) -> list[tuple[float, float]]:
        """Maximal runs of utilisation under IDLE_UTIL inside the allocation, of at least IDLE_RUN."""
        runs: list[tuple[float, float]] = []
        run_start: float | None = None
        for p in self.gpu.phases:
            lo, hi = max(p.start, self.start), min(p.end, self.end)
            if hi <= lo:
                continue
            if p.util < IDLE_UTIL:
                run_start = lo if run_start is None else run_start
                run_end = hi
            elif run_start is not None:
                runs.append((run_start, run_end))
                run_start = None
        if run_start is not None:
            runs.append((run_start, run_end))
        return [(a, b) for a, b in runs if b - a >= IDLE_RUN]

    @property
    def idle_s(self) -> float:
        return sum(b - a for a, b in self.idle_runs())

    @property
    def energy_j(self) -> float:
        return self.gpu.integral("power", self.start, self.end)

    @property
    def active_s(self) -> float:
        return self.gpu.integral("active", self.start, self.end)

    @property
    def allocated_tol_s(self) -> float:
        return STEP

    @property
    def idle_tol_s(self) -> float:
        return 2 * STEP * len(self.idle_runs())

    @property
    def energy_tol_j(self) -> float:
        if not self.gpu.has_counter:
            return 2 * STEP * P_BUSY + STEP * self.gpu.steps("power", self.start, self.end)
        restart = self.gpu.restart_at
        lost = STEP * P_BUSY if restart is not None and self.start < restart < self.end else 0.0
        return STEP * P_BUSY + lost

    @property
    def active_tol_s(self) -> float:
        return 2 * STEP + STEP * self.gpu.steps("active", self.start, self.end)


@dataclass
class Week:
    first_ts: float  # the first sample
    samples: int  # per GPU
    gpus: list[Gpu]
    jobs: list[Job]
    restart_job: Job  # holds the GPU whose counter restarts...
    restart_hour: float  # ...throughout this hour, in which it does

    @property
    def last_ts(self) -> float:
        return self.first_ts + (self.samples - 1) * STEP

    def reading_at_or_after(self, t: float) -> float:
        return self.first_ts + math.ceil((t - self.first_ts) / STEP) * STEP

    def gpu(self, node: int, index: int) -> Gpu:
        return next(g for g in self.gpus if (g.node, g.index) == (node, index))

    def allocations(self) -> list[Allocation]:
        return [Allocation(job, self.gpu(job.node, i)) for job in self.jobs for i in job.gpus]

    def batches(self, batch_samples: int) -> Iterator[dict[str, Any]]:
        """The week as version 1 batches, per node, `batch_samples` timestamps each, in time order."""
        stamps = self.first_ts + STEP * np.arange(self.samples)
        nodes = sorted({g.node for g in self.gpus})
        exporter = {n: str(uuid.UUID(int=random.Random(n).getrandbits(128), version=4)) for n in nodes}
        for seq, lo in enumerate(range(0, self.samples, batch_samples)):
            ts = stamps[lo : lo + batch_samples]
            for node in nodes:
                yield self._batch(node, exporter[node], seq, ts)

    def _batch(self, node: int, exporter_id: str, seq: int, ts: np.ndarray) -> dict[str, Any]:
        gpus = [g for g in self.gpus if g.node == node]
        jobs = [j for j in self.jobs if j.node == node and j.start <= ts[-1] and j.end > ts[0]]
        columns: dict[str, list[Any]] = {k: [] for k in ("ts", "gpu", "up", "job")}
        values: dict[str, list[Any]] = {
            k: [] for k in ("util_pct", "sm_active_pct", "tensor_active_pct", "power_w", "energy_j", "fb_used_bytes")
        }
        for g in gpus:
            held = np.full(len(ts), -1)
            for position, j in enumerate(jobs):
                if g.index in j.gpus:
                    # The exporter names the job holding the GPU at the instant of the reading.
                    held[(ts >= j.start) & (ts < j.end)] = position
            util, sm, tensor = g.at("util", ts), g.at("sm", ts), g.at("tensor", ts)
            columns["ts"] += ts.tolist()
            columns["gpu"] += [g.index] * len(ts)
            columns["up"] += [True] * len(ts)
            columns["job"] += [None if h < 0 else int(h) for h in held]
            values["util_pct"] += util.tolist()
            values["sm_active_pct"] += sm.tolist() if g.has_sm else [None] * len(ts)
            values["tensor_active_pct"] += tensor.tolist() if g.has_sm else [None] * len(ts)
            values["power_w"] += g.at("power", ts).tolist()
            values["energy_j"] += g.counter(ts).tolist() if g.has_counter else [None] * len(ts)
            values["fb_used_bytes"] += g.at("fb", ts).tolist()
        return {
            "format": "gpuscope-samples",
            "version": 1,
            "exporter_id": exporter_id,
            "seq": seq,
            "source": {"cluster": "sim-week", "rack": f"r{node}", "node": f"node{node}", "backend": "sim"},
            "gpus": [
                {
                    "index": g.index,
                    "uuid": f"GPU-{node:04x}{g.index:04x}-0000-4000-8000-000000000000",
                    "model": MODELS[node],
                    "pci_bus_id": f"00000000:{0x18 + g.index:02X}:00.0",
                }
                for g in gpus
            ],
            "jobs": [{"id": j.id, "user": j.user, "account": j.account, "partition": j.partition} for j in jobs],
            "gpu_samples": {**columns, "values": values},
        }


def _episodes(profile: str, start: float, end: float, rng: random.Random) -> list[tuple[float, float, str]]:
    """The job's special stretches (start, end, kind), in time order, the rest busy."""
    length = end - start
    if profile == "idle_stretch":
        run = rng.uniform(45, min(90, length / MINUTE - 60)) * MINUTE
        at = rng.uniform(start + 30 * MINUTE, end - 30 * MINUTE - run)
        return [(at, at + run, "idle")]
    if profile == "pauses":
        out = [(start + f * length, start + f * length + 10 * MINUTE, "idle") for f in (0.15, 0.35, 0.55)]
        pair = start + 0.75 * length
        out += [(pair, pair + 20 * MINUTE, "idle"), (pair + 24 * MINUTE, pair + 44 * MINUTE, "idle")]
        return out
    if profile == "starts_idle":
        return [(start, start + rng.uniform(40, 60) * MINUTE, "idle")]
    if profile == "ends_idle":
        return [(end - rng.uniform(60, min(120, length / MINUTE - 30)) * MINUTE, end, "idle")]
    if profile == "trickle":
        slow = start + 0.25 * length
        trickle = start + 0.6 * length
        return [(slow, slow + 60 * MINUTE, "slow"), (trickle, trickle + 50 * MINUTE, "trickle")]
    return []


def _job_phases(job: Job, episodes: list[tuple[float, float, str]], rng: random.Random) -> list[Phase]:
    """One GPU's phases over the job: busy chunks (each its own level) around the episodes."""
    fb = rng.randint(40, 78) * GIB
    phases: list[Phase] = []

    def busy(lo: float, hi: float) -> None:
        t = lo
        while t < hi:
            chunk_end = min(hi, t + rng.uniform(5, 30) * MINUTE)
            sm = rng.uniform(60, 80)
            phases.append(Phase(t, chunk_end, rng.uniform(90, 100), sm, rng.uniform(0.3, 0.7) * sm, fb))
            t = chunk_end

    t = job.start
    for lo, hi, kind in episodes:
        busy(t, lo)
        if kind == "idle":
            phases.append(Phase(lo, hi, 0.0, 0.0, 0.0, fb))
        elif kind == "slow":
            phases.append(Phase(lo, hi, rng.uniform(6, 9), 4.0, 1.0, fb))
        else:  # trickle
            phases.append(Phase(lo, hi, rng.uniform(2, 4), 1.0, 0.0, fb))
        t = hi
    busy(t, job.end)
    return phases


def build(now: float, seed: int = 20261124, offset: float = 23.5) -> Week:
    """The week of samples ending about three hours before `now` (so every hour of it is settled and due)."""
    rng = random.Random(seed)
    # Hour-aligned (then off the minute, as an exporter's readings are), so that where the schedule falls
    # on the hours, which the report counts in, is the same whenever the test runs.
    samples = DAYS * 24 * 60
    first = (now // HOUR) * HOUR - DAYS * 24 * HOUR - 3 * HOUR + offset
    last = first + (samples - 1) * STEP
    week_end = last + STEP
    gpus = [Gpu(node, index) for node in (0, 1) for index in range(4)]
    for g in gpus:
        g.has_counter = (g.node, g.index) != COUNTERLESS
        g.has_sm = g.node != NO_SM_NODE
        g.counter_offset = rng.uniform(1e9, 5e9)

    jobs: list[Job] = []
    users = list(USERS)
    number = 1000
    for node in (0, 1):
        free = {i: first + rng.uniform(10, 90) * MINUTE for i in range(4)}
        # Node 1 starts with a one-GPU job on the GPU without a counter, so its energy is checked on its own.
        forced: list[tuple[int, tuple[int, ...], str]] = (
            [(1, (3,), "idle_stretch")] if node == 1 else [(4, (0, 1, 2, 3), "busy")]
        )
        turn = node
        while True:
            if forced:
                count, chosen, profile = forced.pop(0)
            else:
                count = rng.choice((1, 1, 2, 2, 3, 4))
                chosen = tuple(sorted(sorted(free, key=free.__getitem__)[:count]))
                profile = PROFILES[turn % len(PROFILES)]
            start = max(free[i] for i in chosen) + rng.uniform(5, 180) * MINUTE
            shortest = 4 * HOUR if profile in ("pauses", "trickle") else 2 * HOUR
            end = min(start + rng.uniform(shortest / HOUR, 24) * HOUR, week_end - 20 * MINUTE)
            if end - start < shortest:
                break
            user = users[turn % len(users)] if turn < 8 else rng.choice(users)
            number += 1
            jobs.append(Job(f"{number}", user, USERS[user], "gpu-long" if end - start > 12 * HOUR else "gpu",
                            node, chosen, start, end, profile))  # fmt: skip
            for i in chosen:
                free[i] = end
            turn += 1

    for g in gpus:
        t = first - HOUR  # the phases cover the whole week, with margin
        for job in sorted((j for j in jobs if j.node == g.node and g.index in j.gpus), key=lambda j: j.start):
            g.phases.append(Phase(t, job.start, 0.0, 0.0, 0.0, 512 * 2**20))  # free: driver's memory only
            g.phases += _job_phases(job, _episodes(job.profile, job.start, job.end, random.Random(job.id)), rng)
            t = job.end
        g.phases.append(Phase(t, week_end + HOUR, 0.0, 0.0, 0.0, 512 * 2**20))
        g.freeze()

    restarting = next(g for g in gpus if (g.node, g.index) == RESTARTING)
    longest = max((j for j in jobs if j.node == restarting.node and restarting.index in j.gpus),
                  key=lambda j: j.end - j.start)  # fmt: skip
    hour, restarting.restart_at = _restart_hour(first, longest, gpus)
    return Week(first, samples, gpus, jobs, restart_job=longest, restart_hour=hour)


def _restart_hour(first: float, job: Job, gpus: list[Gpu]) -> tuple[float, float]:
    """Where the counter restarts (a driver reload): RESTART_AFTER_READING after a reading, in the middle of the hour of
    `job` (held throughout) where the report can best tell a correct restart from a mishandled one."""
    restarting = next(g for g in gpus if (g.node, g.index) == RESTARTING)
    best: tuple[float, float, float] | None = None
    hour = math.ceil((job.start + 2 * STEP) / HOUR) * HOUR
    while hour + HOUR + 2 * STEP <= job.end:
        # The reading after the restart must be on a busy GPU, so that losing it would show.
        for k in range(20, 40):
            reading = first + math.ceil((hour + k * MINUTE - first) / STEP) * STEP
            restart = reading + RESTART_AFTER_READING
            if restarting.at("power", np.array([restart]))[0] >= 500 and not restarting.steps(
                "power", reading, reading + STEP
            ):
                break
        else:
            hour += HOUR
            continue
        unseen = restarting.integral("power", restart, reading + STEP) - hour_energy_tol_j(job, gpus, hour, restart)
        if best is None or unseen > best[0]:
            best = (unseen, hour, restart)
        hour += HOUR
    assert best is not None, "no hour of the job can hold the restart"
    return best[1], best[2]


def hour_energy_tol_j(job: Job, gpus: list[Gpu], hour: float, restart: float | None) -> float:
    """How far the report's energy of `job` over one hour it holds throughout may be from the truth.

    With no allocation edge near, what sampling changes is where each reading's counter growth is put in
    time: within one sample interval of where it was used, and the same way at both ends of the hour (the
    readings sit at the same offset in every minute). The hour's energy is thus the truth over a window
    shifted by less than STEP: off by at most STEP x (highest - lowest power within STEP of either end).
    At a restart, the energy between the last reading before it and the restart is never shown."""
    tol = 0.0
    for g in gpus:
        if g.node != job.node or g.index not in job.gpus:
            continue
        near = [g.at("power", np.array([t]))[0] for t in (hour - STEP, hour + HOUR - STEP)]
        for edge in (hour, hour + HOUR):
            inside = (g.bounds > edge - STEP) & (g.bounds < edge + STEP)
            near += g.values["power"][np.flatnonzero(inside)].tolist()
            near.append(g.at("power", np.array([edge + STEP]))[0])
        tol += STEP * (max(near) - min(near))
        if restart is not None and g.restart_at == restart:
            last_reading = restart - RESTART_AFTER_READING
            tol += g.integral("power", last_reading, restart)
    return tol
