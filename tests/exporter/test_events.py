"""Events from consecutive snapshots, and the pusher keeping them when the memory queue overflows."""

from __future__ import annotations

from gpuscope.collector.ingest.wire import decode
from gpuscope.collector.store.batch import EventIn
from gpuscope.exporter.events import Event, EventTracker
from gpuscope.exporter.pusher import Pusher
from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, Snapshot
from gpuscope.exporter.wire import BINARY_CONTENT_TYPE, Origin

GPU0 = GpuIdentity(0, "GPU-a", "H100", "00:18")
GPU1 = GpuIdentity(1, "GPU-b", "H100", "00:19")


def snap(ts: float, up1: bool = True, xids0: dict[int, int] | None = None) -> Snapshot:
    return Snapshot(
        ts=ts,
        gpus=(GpuReading(GPU0, True, xid_counts=xids0 or {}), GpuReading(GPU1, up1)),
        ports=(),
    )


def test_xid_count_increases_and_up_changes_become_events() -> None:
    tracker = EventTracker()
    assert tracker.observe(snap(1)) == []
    assert tracker.observe(snap(2, xids0={79: 2})) == [Event(2, 0, "xid", code=79, count=2)]
    assert tracker.observe(snap(3, xids0={79: 2})) == []
    assert tracker.observe(snap(4, up1=False, xids0={79: 3, 48: 1})) == [
        Event(4, 0, "xid", code=48, count=1),
        Event(4, 0, "xid", code=79, count=1),
        Event(4, 1, "gpu_lost"),
    ]
    assert tracker.observe(snap(5, xids0={79: 3, 48: 1})) == [Event(5, 1, "gpu_recovered")]


def test_events_of_dropped_snapshots_travel_with_the_next_batch() -> None:
    pusher = Pusher(
        "http://127.0.0.1:9/", "t", Origin("c", "r", "n", "sim", "00000000-0000-0000-0000-000000000001"), queue_limit=2
    )
    t = 1_790_000_000.0
    pusher.enqueue(snap(t + 1))
    pusher.enqueue(snap(t + 2, xids0={13: 1}))
    pusher.enqueue(snap(t + 3))
    pusher.enqueue(snap(t + 4))  # snapshots 1 and 2 are dropped; the XID seen at 2 is not
    assert pusher.stats.snapshots_dropped == 2
    batch = pusher._take_batch()
    assert batch is not None
    decoded = decode(batch.body, now=t + 10, content_type=BINARY_CONTENT_TYPE)
    assert decoded.gpu_samples.ts.tolist() == [t + 3, t + 3, t + 4, t + 4]
    assert decoded.events == (EventIn(t + 2, 0, "xid", 13, 1, None),)
