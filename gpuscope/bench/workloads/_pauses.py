"""Checkpoints as the families' jobs take them, each piece a `Pause` of the job (see `_engine.Pause`).

A checkpoint starts with a device-to-host snapshot (copy kernels, light). Then either every rank's
shard is written while the job waits (GPUs mostly deep idle, every NIC streaming to storage and
waiting on a busy filesystem), or the job steps on while background writers steal CPU and PCIe from
every rank (an asynchronous write: a stall of a share of each step, counted in the step time).
"""

from __future__ import annotations

import numpy as np

from gpuscope.bench.workloads._engine import Pause, mix, onehot
from gpuscope.bench.workloads._gpu import IDLE

WRITING = mix(deep_idle=0.9, idle=0.1)  # the job stopped while its shards are written


def snapshot(start: float, end: float) -> Pause:
    return Pause(start, end, mix(light=0.8, idle=0.2), grain=0.5, name="checkpoint snapshot")


def shard_write(start: float, end: float, sent: np.ndarray, waits: np.ndarray, comp: np.ndarray = WRITING) -> Pause:
    """Every rank writes its shard: (P,) bytes per second each port sends, credit-wait seconds per second."""
    return Pause(start, end, comp, grain=2.0, name="checkpoint write", port_bytes_s=sent, port_wait_s=waits)


def async_write(start: float, end: float, share: float, sent: np.ndarray, waits: np.ndarray) -> Pause:
    """Background writers: the steps stall `share` of the time on every rank, the ports stream to storage."""
    return Pause(
        start,
        end,
        onehot(IDLE),
        grain=0.2,
        name="async checkpoint write",
        stall=True,
        share=share,
        port_bytes_s=sent,
        port_wait_s=waits,
    )
