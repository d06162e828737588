"""The pusher against a real collector: retries keep data, a retried batch is stored once."""

from __future__ import annotations

import time
import uuid

from gpuscope.core.listen import free_loopback_port as free_port
from gpuscope.exporter.pusher import Pusher
from gpuscope.exporter.wire import Origin
from tests.conftest import count_rows
from tests.exporter.helpers import snapshots
from tests.processes import RunningCollector, running_collector


def origin() -> Origin:
    return Origin("test", "rack-00", "node-000", "sim", str(uuid.uuid4()))


def test_collector_away_then_back_loses_nothing(dsn: str) -> None:
    port = free_port()
    token = "t" * 32
    pusher = Pusher(f"http://127.0.0.1:{port}", token, origin(), max_snapshots_per_batch=4)
    for snap in snapshots(10):
        pusher.enqueue(snap)
    assert pusher.push_once() is False, "nothing listens yet: the batch must be kept for a retry"
    assert pusher.pending() == 10 and pusher.stats.failures == 1

    with running_collector(dsn, token=token, port=port):
        try:
            assert pusher.flush(time.monotonic() + 10)
        finally:
            pusher.close()
    assert pusher.stats.snapshots_sent == 10 and pusher.stats.batches_sent == 3
    assert count_rows(dsn, "gpu_sample") == 80


def test_wrong_token_is_retried_not_dropped(collector: RunningCollector) -> None:
    pusher = Pusher(collector.url, "wrong" * 8, origin())
    pusher.enqueue(snapshots(1)[0])
    assert pusher.push_once() is False
    assert pusher.pending() == 1 and pusher.stats.batches_rejected == 0
    pusher.close()


def test_queue_is_bounded_and_counts_what_it_drops() -> None:
    pusher = Pusher("http://127.0.0.1:9", "t" * 32, origin(), queue_limit=5)
    for snap in snapshots(8):
        pusher.enqueue(snap)
    assert pusher.pending() == 5 and pusher.stats.snapshots_dropped == 3


def test_rejects_a_bad_url() -> None:
    import pytest

    with pytest.raises(ValueError, match="push URL"):
        Pusher("collector:9410", "t" * 32, origin())


def test_a_keep_alive_connection_closed_by_the_collector_is_not_a_failure(collector: RunningCollector) -> None:
    """uvicorn closes idle keep-alive connections after 5 s; the next push must just reconnect."""
    pusher = Pusher(collector.url, collector.token, origin())
    batches = snapshots(2)
    pusher.enqueue(batches[0])
    assert pusher.push_once()
    assert pusher._conn is not None and pusher._conn.sock is not None
    pusher._conn.sock.shutdown(2)  # as if the server had closed its end while we were idle
    pusher.enqueue(batches[1])
    assert pusher.push_once()
    assert pusher.stats.failures == 0 and pusher.stats.snapshots_sent == 2
    assert count_rows(collector.dsn, "gpu_sample") == 16
    pusher.close()
