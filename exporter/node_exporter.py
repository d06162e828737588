"""Wires one node's exporter together: source -> sampler -> (exposition, pusher), each in its thread."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from gpuscope.exporter.exposition import ExporterIdentity, Exposition, NameSets
from gpuscope.exporter.http_server import make_server, snapshot_health
from gpuscope.exporter.jobs.base import JobSource, ListeningJobSource
from gpuscope.exporter.pusher import Pusher
from gpuscope.exporter.sampler import Sampler
from gpuscope.exporter.sources.base import Source
from gpuscope.exporter.spool import Spool
from gpuscope.exporter.wire import Origin

log = logging.getLogger(__name__)

VERSION = "0.1.0"
# Sampling and push intervals in seconds: these are `gpuscope exporter`'s defaults too
# (gpuscope/exporter_process.py), so that the documented 5 s holds wherever an exporter is made.
DEFAULT_INTERVAL_S = 5.0
DEFAULT_PUSH_INTERVAL_S = 10.0


@dataclass(frozen=True)
class ExporterConfig:
    cluster: str
    rack: str
    node: str
    interval: float = DEFAULT_INTERVAL_S
    listen: str | None = None  # None: no HTTP endpoint (the demo runs many exporters in one process)
    push_url: str | None = None
    token: str | None = None
    names: NameSets = field(default_factory=NameSets)  # which names /metrics serves: ours, DCGM's, AMD's
    spool_dir: Path | None = None  # where unsent batches wait while the collector is away
    spool_max_bytes: int = 1 << 30
    max_snapshots_per_batch: int = 60
    push_interval: float = DEFAULT_PUSH_INTERVAL_S  # snapshots travel together, one request per interval


class NodeExporter:
    def __init__(self, source: Source, config: ExporterConfig, jobs: JobSource | None = None) -> None:
        if config.push_url and not config.token:
            raise ValueError("pushing to a collector needs a token (--token-file)")
        self.config = config
        self.source = source
        self.pusher = (
            Pusher(
                config.push_url,
                config.token or "",
                Origin(config.cluster, config.rack, config.node, source.name, exporter_id=str(uuid.uuid4())),
                max_snapshots_per_batch=config.max_snapshots_per_batch,
                push_interval=config.push_interval,
                spool=Spool(config.spool_dir, config.spool_max_bytes) if config.spool_dir else None,
            )
            if config.push_url
            else None
        )
        self.sampler = Sampler(
            source, config.interval, subscribers=(self.pusher.enqueue,) if self.pusher else (), jobs=jobs
        )
        identity = ExporterIdentity(config.cluster, config.rack, config.node, source.name, VERSION)
        self.exposition = Exposition(
            identity, lambda: self.sampler.latest, config.names, self.pusher.families if self.pusher else None
        )
        self._server = (
            make_server(
                config.listen,
                self.exposition,
                snapshot_health(lambda: self.sampler.latest.ts if self.sampler.latest else None, config.interval),
            )
            if config.listen
            else None
        )
        self._jobs = jobs
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def address(self) -> tuple[str, int] | None:
        if self._server is None:
            return None
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        if isinstance(self._jobs, ListeningJobSource):  # its listener, apart from the sampler (Kubernetes)
            self._spawn(self._jobs.run, f"jobs-{self.config.node}", self._stop)
        self._spawn(self.sampler.run, f"sampler-{self.config.node}", self._stop)
        if self.pusher is not None:
            self._spawn(self.pusher.run, f"pusher-{self.config.node}", self._stop)
        if self._server is not None:
            self._spawn(self._server.serve_forever, f"http-{self.config.node}")

    def stop(self, flush_seconds: float = 5.0) -> None:
        """Stop sampling, then give queued samples a bounded chance to reach the collector."""
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for thread in self._threads:
            thread.join(timeout=flush_seconds)
        if self.pusher is not None:
            if not self.pusher.flush(time.monotonic() + flush_seconds):
                lost = self.pusher.spill()
                if lost:
                    why = "the spool could not take them" if self.config.spool_dir else "no --spool-dir"
                    log.warning("%s: %d snapshots not delivered at shutdown (%s)", self.config.node, lost, why)
                else:
                    log.info(
                        "%s: unsent batches kept in %s for the next start", self.config.node, self.config.spool_dir
                    )
            self.pusher.close()
        self.source.close()

    def _spawn(self, target: object, name: str, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)  # type: ignore[arg-type]
        thread.start()
        self._threads.append(thread)
