"""Lossless push: a collector that goes away and comes back, an exporter restarted in between."""

from __future__ import annotations

import contextlib
import time
import uuid
from pathlib import Path

from gpuscope.core.listen import free_loopback_port as free_port
from gpuscope.exporter.node_exporter import ExporterConfig, NodeExporter
from gpuscope.exporter.pusher import Pusher
from gpuscope.exporter.sim import JobSchedule, SimNodeSource, build_topology
from gpuscope.exporter.spool import Spool
from gpuscope.exporter.wire import Origin
from tests.conftest import count_rows
from tests.exporter.helpers import snapshots, stored_rows
from tests.processes import running_collector
from tests.waiting import eventually

TOKEN = "s" * 32


def collector_on(dsn: str, port: int) -> contextlib.ExitStack:
    """A collector on `port` until the returned stack is closed (a test takes it away and back)."""
    stack = contextlib.ExitStack()
    stack.enter_context(running_collector(dsn, token=TOKEN, port=port))
    return stack


def test_collector_outage_during_pushing_loses_and_duplicates_nothing(dsn: str, tmp_path: Path) -> None:
    port = free_port()
    collector = collector_on(dsn, port)
    topology = build_topology(1, 8, 1, cluster="outage")
    exporter = NodeExporter(
        SimNodeSource(topology[0], JobSchedule(topology, 3), 3),
        ExporterConfig(
            "outage",
            "rack-00",
            "node-000",
            interval=0.05,
            push_url=f"http://127.0.0.1:{port}",
            push_interval=0.5,
            token=TOKEN,
            spool_dir=tmp_path / "spool",
            max_snapshots_per_batch=10,
        ),
    )
    pusher = exporter.pusher
    assert pusher is not None and pusher.spool is not None
    spool = pusher.spool
    exporter.start()
    try:
        eventually(lambda: pusher.stats.batches_sent >= 2, what="pushes to get through before the outage")
        collector.close()  # the collector goes away for a while...
        # ...long enough for several full batches to go to disk
        eventually(lambda: len(spool) >= 3, timeout=15, what="full batches to go to disk during the outage")
        assert pusher.stats.failures > 0
        sent_in_outage = pusher.stats.snapshots_sent
        collector = collector_on(dsn, port)  # ...and comes back on the same address
        eventually(
            lambda: len(spool) == 0 and pusher.stats.snapshots_sent > sent_in_outage,
            timeout=15,
            what="the spool to be replayed to the collector that came back",
        )
    finally:
        exporter.stop(flush_seconds=15)
        collector.close()
    sampled = exporter.sampler.cycles
    assert stored_rows(dsn) == (sampled * 8, sampled * 8), "every sample stored, exactly once"
    assert len(spool) == 0


def test_unsent_batches_survive_an_exporter_restart(dsn: str, tmp_path: Path) -> None:
    port = free_port()  # nothing listens: the collector is down
    spool_dir = tmp_path / "spool"
    first = Pusher(
        f"http://127.0.0.1:{port}",
        TOKEN,
        Origin("r", "rack", "node", "sim", str(uuid.uuid4())),
        max_snapshots_per_batch=4,
        spool=Spool(spool_dir),
    )
    for snap in snapshots(10):
        first.enqueue(snap)
    assert first.push_once() is False
    assert first.spill() == 0, "with a spool nothing is lost at shutdown"
    first.close()
    assert len(list(spool_dir.glob("*.batch"))) == 3

    collector = collector_on(dsn, port)
    try:
        second = Pusher(
            f"http://127.0.0.1:{port}",
            TOKEN,
            Origin("r", "rack", "node", "sim", str(uuid.uuid4())),
            spool=Spool(spool_dir),
        )
        assert second.flush(time.monotonic() + 10)
        second.close()
    finally:
        collector.close()
    assert stored_rows(dsn) == (80, 80)
    assert list(spool_dir.iterdir()) == []


def test_spool_cap_drops_oldest_and_counts(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=250)
    for i in range(5):
        spool.put(bytes([i]) * 100)
    assert len(spool) == 2 and spool.dropped_batches == 3
    oldest = spool.oldest()
    assert oldest is not None and oldest[1] == bytes([3]) * 100, "the newest batches are kept, in order"


def test_half_written_batch_from_a_crash_is_discarded(tmp_path: Path) -> None:
    (tmp_path / "00000000000000000001-000000.tmp").write_bytes(b"partial")
    (tmp_path / "00000000000000000002-000000.batch").write_bytes(b"whole")
    spool = Spool(tmp_path)
    assert len(spool) == 1 and spool.oldest() == (tmp_path / "00000000000000000002-000000.batch", b"whole")
    assert not list(tmp_path.glob("*.tmp"))


def test_exporter_metrics_show_the_spool(dsn: str, tmp_path: Path) -> None:
    topology = build_topology(1, 2, 1)
    exporter = NodeExporter(
        SimNodeSource(topology[0], JobSchedule(topology, 3), 3),
        ExporterConfig(
            "c",
            "r",
            "n",
            interval=0.05,
            push_url=f"http://127.0.0.1:{free_port()}",
            push_interval=0.5,
            token=TOKEN,
            spool_dir=tmp_path,
            listen="127.0.0.1:0",
        ),
    )
    exporter.start()
    try:
        pusher = exporter.pusher
        assert pusher is not None
        eventually(lambda: pusher.stats.failures > 0, what="a push to fail (nothing listens)")
        body, _ = exporter.exposition.render(None)
    finally:
        exporter.stop(flush_seconds=0.5)
    assert count_rows(dsn, "gpu_sample") == 0
    text = body.decode()
    assert "gpuscope_exporter_push_failures_total" in text and "gpuscope_exporter_spool_bytes" in text
