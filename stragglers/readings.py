"""One sample interval of a job's telemetry, as the straggler detector reads it: named arrays, one value
per GPU (in rank order) or per InfiniBand port (in the job's port order), NaN where a sample is missing."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PER_GPU = ("work", "util_pct", "sm_clock_mhz", "clock_event_reasons", "sm_active_pct", "power_w", "nvlink_errors_per_s")
PER_PORT = ("xmit_wait_per_s", "link_gbps", "xmit_bytes_per_s")


@dataclass(frozen=True)
class Readings:
    """What a job's GPUs and ports read over the sample interval that ends at `t_s`. An optional array not
    given (None: no GPU of the job has the counter, or the feed has none) reads as NaN throughout."""

    t_s: float  # the end of the interval (the time of its last sample), seconds since the epoch
    # Per GPU. The work it did: tensor activity (%), or SM activity where it has no tensor counter.
    work: np.ndarray
    util_pct: np.ndarray  # GPU utilisation: busy in any kernel (%)
    sm_clock_mhz: np.ndarray
    clock_event_reasons: np.ndarray  # NVML clock event reason bits (as floats, for NaN)
    # Per port.
    xmit_wait_per_s: np.ndarray  # transmit wait ticks per second
    link_gbps: np.ndarray  # the link's rate
    xmit_bytes_per_s: np.ndarray | None = None  # bytes sent per second
    # Per GPU, where known. How busy it was (SM activity, %), where `work` is tensor activity.
    sm_active_pct: np.ndarray | None = None
    power_w: np.ndarray | None = None
    nvlink_errors_per_s: np.ndarray | None = None  # its NVLink links' replays, recoveries and CRC errors

    def __post_init__(self) -> None:
        for names, like, per in ((PER_GPU, self.work, "GPU"), (PER_PORT, self.xmit_wait_per_s, "port")):
            if np.ndim(like) != 1:
                raise ValueError(f"readings: {names[0]} must hold one value per {per}, not shape {np.shape(like)}")
            for name in names[1:]:
                value = getattr(self, name)
                if value is not None and np.shape(value) != like.shape:
                    raise ValueError(
                        f"readings: {name} has shape {np.shape(value)}, not one value per {per} like {names[0]}"
                        f" {like.shape}"
                    )

    @property
    def gpus(self) -> int:
        return int(self.work.shape[0])

    @property
    def ports(self) -> int:
        return int(self.xmit_wait_per_s.shape[0])
