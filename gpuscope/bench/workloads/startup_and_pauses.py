"""startup_and_pauses: a data-parallel job (NCCL spin waits, as spin_dp) seen from its launch, with the
things a real job does that are not faults.

Start. Processes launch and import (GPUs deep idle: clocks down, idle reason 0x1, ~70 W), NCCL comes up
and the model is built or loaded (short kernels now and then), then compilation and autotuning: mostly
idle with bursts of benchmark GEMMs. Nodes finish compiling at different times; those done first enter
the first collective and spin there (util 100%, no tensor work) while the last node is still compiling:
for minutes the job has one node that looks 'different' and a crowd that looks like it is waiting on
it. Then the input pipeline fills (mostly idle), and the first steps run slower than the steady ones
(allocator growth, caches, lazily compiled shapes) and speed up over a few minutes. No step happens
before the first one (step_s NaN); the warm-up is part of the clean step time.

Pauses, each a fact of the job, on all ranks:
- synchronous checkpoints: a device-to-host snapshot (copy kernels) then either every node writes its shard
  (GPUs idle, clocks drop; every NIC sends to storage and accrues xmit_wait against a busy filesystem) or
  rank 0 alone writes the gathered state while every other rank waits in a NCCL barrier, spinning:
  utilisation barely drops, tensor activity does, node 0's NIC alone carries the write;
- asynchronous checkpoints: a short snapshot, then training goes on while background writers steal CPU and
  PCIe from every rank: steps 5-20% slower on all ranks for minutes (clean: in clean_step_s too);
- evaluation: forward passes only, no gradient traffic, ranks with smaller shards finish early and spin
  at the metrics all-reduce (step_s NaN);
- data-loader stalls on every rank (a shared filesystem hiccup): seconds of idle GPUs inside a step,
  counted in the (clean) step time (step_s NaN where a stall fills most of a sample interval).
Faults (from 10 minutes after the first step on) propagate as in spin_dp, through all of the above.
"""

from __future__ import annotations

import numpy as np

from gpuscope.bench.workloads import Case
from gpuscope.bench.workloads._dp import DP, Extras, build
from gpuscope.bench.workloads._engine import Pause, mix, onehot
from gpuscope.bench.workloads._gpu import DEEP, IDLE, N_ACT, SPIN
from gpuscope.bench.workloads._pauses import async_write, shard_write, snapshot

FAMILY = "startup_and_pauses"


def _start(rng: np.random.Generator, dp: DP) -> tuple[list[Pause], float]:
    R, gpn = dp.ranks, dp.gpn
    pauses = []
    t = float(rng.uniform(30, 180))
    pauses.append(Pause(0.0, t, onehot(DEEP), name="launch"))
    t2 = t + float(rng.uniform(20, 120))
    pauses.append(Pause(t, t2, mix(deep_idle=0.6, light=0.4), grain=5.0, name="init"))
    compile_s = float(rng.uniform(60, 600))
    ends = t2 + compile_s * (1 + rng.uniform(0, 0.15, dp.nodes))
    compiling = mix(deep_idle=0.75, light=0.15, compute=0.1)
    start = t2
    for end in np.sort(ends):
        done = np.repeat(ends < end - 1e-9, gpn)
        comp = np.where(done[:, None], onehot(SPIN)[None, :], compiling[None, :])
        if end > start:
            pauses.append(Pause(start, float(end), comp, grain=3.0, name="compile"))
        start = float(end)
    t4 = start + float(rng.uniform(10, 60))
    pauses.append(Pause(start, t4, mix(idle=0.7, compute=0.3), grain=2.0, name="input warm-up"))
    del R
    return pauses, t4


def _storage(dp: DP, nodes: np.ndarray, rate: float, wait: float) -> tuple[np.ndarray, np.ndarray]:
    on = np.isin(dp.port_node, nodes).astype(float)
    return on * rate, on * wait


def extras(rng: np.random.Generator, dp: DP, step_s: float, duration: float) -> Extras:
    del step_s
    pauses, first_step = _start(rng, dp)
    decoys = ["startup", "first_collective_wait", "warmup_ramp"]
    R = dp.ranks
    kinds = set()
    period = float(rng.uniform(900, 3600))
    mode = str(rng.choice(["sharded", "rank0", "async"]))
    t = first_step + period
    while t < duration - 120:
        snap = float(rng.uniform(3, 20))
        pauses.append(snapshot(t, t + snap))
        if mode == "sharded":
            write = float(rng.uniform(20, 120))
            b, w = _storage(dp, np.arange(dp.nodes), rng.uniform(1e9, 4e9), rng.uniform(0.05, 0.3))
            pauses.append(shard_write(t + snap, t + snap + write, b, w))
            t_end = t + snap + write
        elif mode == "rank0":
            write = float(rng.uniform(30, 180))
            comp = np.tile(onehot(SPIN), (R, 1))
            comp[0] = mix(light=0.3, idle=0.7)
            b, w = _storage(dp, np.array([0]), rng.uniform(1e9, 3e9), rng.uniform(0.02, 0.2))
            pauses.append(
                Pause(
                    t + snap,
                    t + snap + write,
                    comp,
                    grain=1.0,
                    name="checkpoint rank-0 write",
                    port_bytes_s=b,
                    port_wait_s=w,
                )
            )
            t_end = t + snap + write
        else:
            write = float(rng.uniform(60, 300))
            b, w = _storage(dp, np.arange(dp.nodes), rng.uniform(3e8, 1.5e9), rng.uniform(0.02, 0.15))
            pauses.append(async_write(t + snap, t + snap + write, float(rng.uniform(0.05, 0.2)), b, w))
            t_end = t + snap + write
        kinds.add(f"checkpoint_{mode}")
        t = t_end + period
    if rng.random() < 0.8:
        every = float(rng.uniform(1800, 3600))
        t = first_step + every * rng.uniform(0.5, 1.0)
        while t < duration - 300:
            length = float(rng.uniform(60, 300))
            if not any(p.start < t + length and t < p.end for p in pauses):
                early = np.repeat(rng.uniform(0, 0.3, dp.nodes), dp.gpn)
                evaluating = mix(compute=0.55, idle=0.35, light=0.1)
                comp = (1 - early)[:, None] * evaluating[None, :] + early[:, None] * onehot(SPIN)[None, :]
                pauses.append(Pause(t, t + length, comp.reshape(R, N_ACT), grain=1.0, name="eval"))
                kinds.add("eval")
            t += every
    t = first_step + float(rng.exponential(900))
    while t < duration - 60:
        length = float(rng.uniform(3, 60))
        if not any(p.start < t + length and t < p.end for p in pauses):
            comp = onehot(IDLE) if length < 10 else mix(idle=0.4, deep_idle=0.6)
            pauses.append(Pause(t, t + length, comp, grain=0.0, name="data-loader stall", stall=True))
            kinds.add("dataloader_stall")
        t += length + float(rng.exponential(rng.uniform(600, 1800)))
    ramp = (first_step, float(rng.uniform(0.3, 1.0)), float(rng.uniform(60, 240)))
    return Extras(
        pauses=pauses, ramp=ramp, decoys=decoys + sorted(kinds), earliest_fault_s=max(600.0, first_step + 600.0)
    )


def generate(seed: int) -> Case:
    return build(FAMILY, seed, wait_act=SPIN, extras=extras)
