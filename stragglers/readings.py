"""One sample interval of a job's telemetry, as the straggler detector reads it: named arrays, one value
per GPU (in rank order) or per InfiniBand port (in the job's port order), NaN where a sample is missing."""

from __future__ import annotations

from dataclasses import dataclass, replace

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


@dataclass(frozen=True)
class ReadingRows:
    """Readings of many jobs of one layout over the same sample interval, a row per job (jobs, GPUs) or
    (jobs, ports): every array given, NaN where a job's feed has no such counter (what None reads as)."""

    t_s: float
    work: np.ndarray
    util_pct: np.ndarray
    sm_clock_mhz: np.ndarray
    clock_event_reasons: np.ndarray
    sm_active_pct: np.ndarray
    power_w: np.ndarray
    nvlink_errors_per_s: np.ndarray
    xmit_wait_per_s: np.ndarray
    link_gbps: np.ndarray
    xmit_bytes_per_s: np.ndarray

    def __post_init__(self) -> None:
        for names, like, per in ((PER_GPU, self.work, "GPU"), (PER_PORT, self.xmit_wait_per_s, "port")):
            for name in names:
                value = getattr(self, name)
                if np.ndim(value) != 2 or np.shape(value)[0] != self.jobs or np.shape(value) != np.shape(like):
                    raise ValueError(
                        f"reading rows: {name} has shape {np.shape(value)}, not one row per job of one value per"
                        f" {per} like {names[0]} {np.shape(like)} ({self.jobs} jobs)"
                    )

    @property
    def jobs(self) -> int:
        return int(np.shape(self.work)[0])

    def of(self, kept: np.ndarray) -> ReadingRows:
        """The rows where `kept` (a mask over the jobs) holds."""
        return replace(self, **{name: getattr(self, name)[kept] for name in PER_GPU + PER_PORT})
