"""Events from consecutive snapshots, and the pusher keeping them when the memory queue overflows."""

from __future__ import annotations

from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from gpuscope.collector.ingest.wire import decode
from gpuscope.collector.store.batch import EventIn
from gpuscope.core.ingest_wire import BINARY_CONTENT_TYPE
from gpuscope.exporter.events import Event, EventTracker
from gpuscope.exporter.exposition import ExporterIdentity, Exposition
from gpuscope.exporter.pusher import Pusher
from gpuscope.exporter.snapshot import UNKNOWN_XID, GpuIdentity, GpuReading, Snapshot
from gpuscope.exporter.sources.nvml import SLOW_EVERY, NvmlSource
from gpuscope.exporter.testing.fake_nvml import h100_node, make_fake_pynvml
from gpuscope.exporter.wire import Origin

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


def test_a_gpu_not_opened_at_start_gives_a_recovered_event_when_it_opens() -> None:
    unknown = GpuIdentity(1, "", "", "")  # what the NVML source reports before it could open the GPU
    tracker = EventTracker()
    assert tracker.observe(Snapshot(1, (GpuReading(GPU0, True), GpuReading(unknown, False)), ())) == []
    assert tracker.observe(Snapshot(2, (GpuReading(GPU0, True), GpuReading(unknown, False)), ())) == []
    assert tracker.observe(Snapshot(3, (GpuReading(GPU0, True), GpuReading(GPU1, True, xid_counts={13: 1})), ())) == [
        Event(3, 1, "gpu_recovered"),
        Event(3, 1, "xid", code=13, count=1),
    ]


def test_another_gpu_at_a_known_index_is_followed_afresh() -> None:
    tracker = EventTracker()
    tracker.observe(Snapshot(1, (GpuReading(GPU0, False, xid_counts={79: 1}),), ()))
    other = GpuIdentity(0, "GPU-c", "H100", "00:18")
    assert tracker.observe(Snapshot(2, (GpuReading(other, True, xid_counts={79: 1}),), ())) == [
        Event(2, 0, "xid", code=79, count=1)
    ], "not GPU-a recovering, and its XID counts are its own"


def test_the_nvml_source_and_the_tracker_report_a_late_gpu_recovering() -> None:
    gpus = h100_node(2)
    gpus[1].lost = True  # lost before the exporter started: NVML will not tell its UUID
    source = NvmlSource(make_fake_pynvml(gpus), xid_events=False)
    tracker = EventTracker()
    events = [tracker.observe(Snapshot(0.0, source.read(0.0)[0], ()))]
    gpus[1].lost = False
    for t in range(1, SLOW_EVERY + 1):  # opened again on the slow cadence
        events.append(tracker.observe(Snapshot(float(t), source.read(float(t))[0], ())))
    source.close()
    assert [e for batch in events for e in batch] == [Event(float(SLOW_EVERY), 1, "gpu_recovered")]


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


def test_an_unknown_xid_is_code_0_for_the_collector_and_xid_unknown_for_prometheus() -> None:
    t = 1_790_000_000.0
    tracker = EventTracker()
    tracker.observe(snap(t))
    later = snap(t + 1, xids0={UNKNOWN_XID: 2, 79: 1})
    events = tracker.observe(later)
    assert events == [Event(t + 1, 0, "xid", code=0, count=2), Event(t + 1, 0, "xid", code=79, count=1)]
    pusher = Pusher("http://127.0.0.1:9/", "t", Origin("c", "r", "n", "nvml", "00000000-0000-0000-0000-000000000002"))
    pusher.enqueue(snap(t))
    pusher.enqueue(later)
    batch = pusher._take_batch()
    assert batch is not None
    decoded = decode(batch.body, now=t + 10, content_type=BINARY_CONTENT_TYPE)
    assert decoded.events == (EventIn(t + 1, 0, "xid", 0, 2, None), EventIn(t + 1, 0, "xid", 79, 1, None))
    exposition = Exposition(ExporterIdentity("c", "r", "n", "nvml", "test"), lambda: later)
    body, _ = exposition.render("application/openmetrics-text; version=1.0.0")
    families = {f.name: f for f in parse_openmetrics(body.decode())}
    samples = families["gpuscope_gpu_xid_errors"].samples
    counts = {s.labels["xid"]: s.value for s in samples if s.name.endswith("_total")}
    assert counts == {"unknown": 2, "79": 1}
