"""What the ingest route keeps between requests: the token check, caches, limits and its own metrics."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.multiprocess import MultiProcessCollector

from gpuscope.collector.api.auth import TokenAuth
from gpuscope.collector.store.availability import DatabaseStatus
from gpuscope.collector.store.group_writer import GroupWriter
from gpuscope.collector.store.writer import InventoryCache


class IngestMetrics:
    """The ingest route's counters. Under --workers N they are summed over the workers at each scrape
    (scraped_registry below): a Gauge added here needs a multiprocess_mode saying how to combine them."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.batches = Counter("gpuscope_collector_batches", "Ingest requests by result", ["result"], registry=registry)
        self.rows = Counter("gpuscope_collector_rows", "Sample rows stored", ["kind"], registry=registry)
        self.seconds = Histogram(
            "gpuscope_collector_ingest_seconds",
            "Time from request to durable commit",
            registry=registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        # The children every stored batch touches, looked up once (labels() takes a lock and a lookup)
        self.stored = self.batches.labels("stored")
        self.duplicate = self.batches.labels("duplicate")
        self.gpu_rows = self.rows.labels("gpu")
        self.port_rows = self.rows.labels("port")
        self.mig_rows = self.rows.labels("mig")


# Under --workers N each worker process counts into its own files in this folder, which the parent
# creates before it starts them (collector/workers.py): prometheus_client's multiprocess mode. It must
# be in the environment before prometheus_client is imported, which is why the parent sets it and the
# workers (spawned, fresh interpreters) inherit it.
MULTIPROCESS_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


def scraped_registry(own: CollectorRegistry) -> CollectorRegistry:
    """What a scrape of /metrics reads: this process's own metrics, or under --workers N every worker's
    summed from their files, whichever worker the scrape's connection reached."""
    folder = os.environ.get(MULTIPROCESS_DIR_VARIABLE)
    if not folder:
        return own
    everyone = CollectorRegistry()
    MultiProcessCollector(everyone, path=folder)  # reads the files at each collect, i.e. each scrape
    return everyone


# Bodies decoded in worker threads at once: each may take up to a few hundred MB while it is parsed.
DECODE_THREADS = 2


@dataclass
class IngestState:
    auth: TokenAuth
    max_body_bytes: int
    write_slots: asyncio.Semaphore
    writer: GroupWriter
    retention_s: float = 30 * 86400.0
    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=True))
    cache: InventoryCache = field(default_factory=InventoryCache)
    decode_slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(DECODE_THREADS))
    database: DatabaseStatus = field(default_factory=DatabaseStatus)  # refuse at once while it is away

    def __post_init__(self) -> None:
        self.metrics = IngestMetrics(self.registry)
        self.scraped = scraped_registry(self.registry)  # what /metrics serves (collector/api/health.py)
