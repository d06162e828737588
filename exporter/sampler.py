"""The one sampling loop: reads the source once per interval and publishes an immutable snapshot.

Nothing else touches hardware: /metrics and the pusher only read the published snapshot.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from gpuscope.exporter.jobs.base import JobSource, MigJobSource
from gpuscope.exporter.snapshot import GpuReading, JobInfo, Snapshot
from gpuscope.exporter.sources.base import Source

log = logging.getLogger(__name__)


class Sampler:
    def __init__(
        self,
        source: Source,
        interval: float,
        subscribers: tuple[Callable[[Snapshot], None], ...] = (),
        clock: Callable[[], float] = time.time,
        jobs: JobSource | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval}")
        self.source = source
        self.interval = interval
        self._driver_version: str = getattr(source, "driver_version", "")  # read once, when the backend started
        self.latest: Snapshot | None = None
        self.cycles = 0
        self.failed_cycles = 0
        self._subscribers = subscribers
        self._clock = clock
        self._jobs = jobs
        # Attribution that tells the MIG devices of a GPU apart (Slurm); None: only whole GPUs (the simulator).
        self._mig_jobs = jobs if isinstance(jobs, MigJobSource) else None

    def sample_once(self, now: float | None = None) -> Snapshot:
        ts = self._clock() if now is None else now
        started = time.perf_counter()
        gpus, ports = self.source.read(ts)
        jobs = self._assign_jobs(gpus, ts)
        mig_jobs = self._assign_mig_jobs(gpus, ts)
        snapshot = Snapshot(
            ts=ts,
            gpus=gpus,
            ports=ports,
            sample_seconds=time.perf_counter() - started,
            jobs=jobs,
            mig_jobs=mig_jobs,
            driver_version=self._driver_version,
        )
        self.latest = snapshot  # a single reference swap: readers see the old or the new, never half
        self.cycles += 1
        for subscriber in self._subscribers:
            subscriber(snapshot)
        return snapshot

    def _assign_jobs(self, gpus: tuple[GpuReading, ...], ts: float) -> dict[int, JobInfo] | None:
        if self._jobs is None:
            return None
        try:
            return self._jobs.assign(tuple(r.gpu for r in gpus), ts)
        except Exception:  # attribution is an extra: a bug there must not stop the telemetry
            log.exception("job attribution failed this cycle")
            return None

    def _assign_mig_jobs(self, gpus: tuple[GpuReading, ...], ts: float) -> dict[str, JobInfo] | None:
        if self._mig_jobs is None:
            return None
        migs = {r.gpu.index: tuple(m.uuid for m in r.mig) for r in gpus if r.mig}
        try:
            return self._mig_jobs.assign_mig(migs, ts)
        except Exception:  # as for whole GPUs: the telemetry goes on without it
            log.exception("MIG job attribution failed this cycle")
            return None

    def run(self, stop: threading.Event) -> None:
        """Sample on interval boundaries until `stop` is set; a failed cycle is logged, not fatal."""
        next_tick = time.monotonic()
        while not stop.is_set():
            try:
                self.sample_once()
            except Exception:
                self.failed_cycles += 1
                log.exception("sampling cycle failed (source %s)", self.source.name)
            next_tick += self.interval
            delay = next_tick - time.monotonic()
            if delay < 0:  # fell behind (suspended, overloaded): skip missed ticks, don't burst
                next_tick = time.monotonic()
                delay = 0
            stop.wait(delay)
