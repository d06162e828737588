"""What is sampled during a collector outage fills one open spool batch at a time (exporter/open_batch.py):
one file per full batch instead of one per back-off tick, as durable, and never sent under a sequence
number that later goes out with other content.

Against a loopback HTTP server that stands in for the collector, or nothing at all (closed port)."""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpuscope.collector.ingest.wire import decode
from gpuscope.core.ingest_wire import BINARY_CONTENT_TYPE
from gpuscope.core.listen import free_loopback_port
from gpuscope.exporter import pusher as pusher_module
from gpuscope.exporter.pusher import BACKOFF_TICK_S
from gpuscope.exporter.snapshot import Snapshot
from gpuscope.exporter.spool import SUFFIX, Spool
from tests.exporter.helpers import snapshots
from tests.exporter.push_harness import (
    FakeCollector,
    FullDisk,
    Ident,
    flat,
    new_pusher,
    running,
    serving,
    spooled,
    stamps_of,
    unpack,
)
from tests.waiting import eventually

FAST_TICK_S = 0.05  # the back-off tick for tests that count ticks, not wait them out


def test_an_outage_leaves_a_file_per_full_batch_not_per_tick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At 1-5 s sampling a tick holds one snapshot: a file (and a replay request) per tick was up to 60x too many."""
    monkeypatch.setattr(pusher_module, "BACKOFF_TICK_S", FAST_TICK_S)
    ticks, per_batch = 20, 6
    spool = Spool(tmp_path)
    pusher = new_pusher(f"http://127.0.0.1:{free_loopback_port()}", spool, max_snapshots_per_batch=per_batch)
    taken = snapshots(1 + ticks)
    pusher.enqueue(taken[0])
    with running(pusher):
        eventually(lambda: len(spool) == 1 and pusher.pending() == 0, timeout=2, what="the failed batch on disk")
        for snapshot in taken[1:]:  # one snapshot per tick
            pusher.enqueue(snapshot)
            eventually(lambda: pusher.pending() == 0, timeout=2, interval=0.01, what="a tick to spool it")
    batches = spooled(tmp_path)
    assert len(batches) == 1 + math.ceil(ticks / per_batch), "the failed batch, then one file per full batch"
    assert [len(stamps) for _, stamps in batches] == [1, 6, 6, 6, 2]
    assert flat(batches) == stamps_of(taken), "every snapshot once, in order"
    seqs = [seq for (_, seq), _ in batches]
    assert seqs == sorted(set(seqs))
    assert spool.size_bytes == sum(path.stat().st_size for path in tmp_path.glob("*" + SUFFIX)), "exact accounting"


@pytest.mark.parametrize("killed_after", [9, 20, 33])
def test_a_killed_exporter_loses_at_most_a_tick_and_its_successor_replays_the_rest_once(
    tmp_path: Path, killed_after: int
) -> None:
    """Killed at some moment of an outage: what is on disk (the open batch in its last version) is replayed
    exactly once by the next exporter; what is not was sampled after the last tick."""
    port = free_loopback_port()
    url = f"http://127.0.0.1:{port}"
    taken = snapshots(killed_after)
    first = new_pusher(url, Spool(tmp_path), push_interval=0.2, max_snapshots_per_batch=8)
    enqueued_at = []
    with running(first):
        for snapshot in taken:
            first.enqueue(snapshot)
            enqueued_at.append(time.monotonic())
            time.sleep(0.05)
        assert first.stats.failures > 0
    killed_at = time.monotonic()  # SIGKILL: `first` is abandoned as it is
    on_disk = spooled(tmp_path)
    kept = flat(on_disk)
    assert kept == stamps_of(taken[: len(kept)]), "what is on disk is all that was sampled up to some moment"
    lost = len(taken) - len(kept)
    assert first.pending() == lost, "what is not on disk was still in memory"
    assert all(killed_at - at < BACKOFF_TICK_S + 0.5 for at in enqueued_at[len(kept) :]), "sampled since the last tick"

    collector = FakeCollector()
    with serving(collector, port):
        second = new_pusher(url, Spool(tmp_path))
        assert second.flush(time.monotonic() + 5)
        second.close()
    delivered = [unpack(body) for _, body in collector.received]
    assert delivered == on_disk, "each file once, as it was on disk, in order"
    assert list(tmp_path.iterdir()) == []


@dataclass
class LostAnswers(FakeCollector):
    """Stores a batch (first arrival wins, as the collector does) but answers 503 the first time, as if the answer
    were lost; the first exporter's first batch is answered at once so that the outage ends quickly."""

    stored: dict[Ident, bytes] = field(default_factory=dict)
    bodies: dict[Ident, set[bytes]] = field(default_factory=dict)

    def answer(self, body: bytes) -> tuple[int, str | None]:
        self.received.append((time.monotonic(), body))
        ident, _ = unpack(body)
        self.bodies.setdefault(ident, set()).add(body)
        first_arrival = ident not in self.stored
        self.stored.setdefault(ident, body)
        return (503, None) if first_arrival and ident[1] > 1 else (200, None)


def test_a_batch_is_never_sent_again_with_other_content(tmp_path: Path) -> None:
    """The collector comes back mid-outage: the open batch may be the next one sent, so it is closed first;
    had it grown while its answer was awaited, its retry or a successor's replay would differ."""
    port = free_loopback_port()
    url = f"http://127.0.0.1:{port}"
    pool = iter(snapshots(400))
    taken: list[Snapshot] = []
    first = new_pusher(url, Spool(tmp_path), push_interval=0.2)
    collector = LostAnswers()

    def sample(count: int, every: float) -> None:
        for snapshot in itertools.islice(pool, count):
            first.enqueue(snapshot)
            taken.append(snapshot)
            time.sleep(every)

    with running(first):
        sample(12, 0.04)  # the collector is away
        with serving(collector, port):  # ...and back, storing every batch but losing the first answer to each
            deadline = time.monotonic() + 8
            while not any(seq > 2 for _, seq in collector.stored) and time.monotonic() < deadline:
                sample(1, 0.03)  # until a batch opened during the outage has been sent while samples came in
            sample(10, 0.03)
            eventually(lambda: first.pending() == 0, timeout=2, what="what was sampled to reach the spool")
            # SIGKILL: `first` is abandoned as it is, with batches awaiting their retry on disk
    assert first.stats.failures >= 2, "the outage, then at least one lost answer"
    assert any(seq > 2 for _, seq in collector.stored), "batches opened during the outage were sent"
    with serving(collector, port):
        second = new_pusher(url, Spool(tmp_path))
        assert second.flush(time.monotonic() + 8)
        second.close()
    assert all(len(bodies) == 1 for bodies in collector.bodies.values()), "one content per (exporter_id, seq)"
    stored = sorted(stamp for body in collector.stored.values() for stamp in unpack(body)[1])
    assert stored == stamps_of(taken), "every snapshot stored, once"


def with_xids(taken: list[Snapshot]) -> list[Snapshot]:
    """The same snapshots, GPU 0 logging one more XID 79 in each: every snapshot carries one event."""
    out = []
    for count, snapshot in enumerate(taken, start=1):
        gpu0 = dataclasses.replace(snapshot.gpus[0], xid_counts={79: count})
        out.append(dataclasses.replace(snapshot, gpus=(gpu0, *snapshot.gpus[1:])))
    return out


def xids_of(body: bytes) -> list[float]:
    """When the XIDs 79 of GPU 0 in this batch happened (the simulator may log others)."""
    events = decode(body, now=time.time() + 60, content_type=BINARY_CONTENT_TYPE).events
    return [event.ts for event in events if (event.gpu, event.kind, event.code) == (0, "xid", 79)]


def test_a_failed_rewrite_keeps_the_last_version_on_disk_and_the_new_snapshots_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pusher_module, "BACKOFF_TICK_S", FAST_TICK_S)
    port = free_loopback_port()
    spool = FullDisk(tmp_path)
    spool.full = False
    pusher = new_pusher(f"http://127.0.0.1:{port}", spool)
    taken = with_xids(snapshots(10))
    pusher.enqueue(taken[0])
    with running(pusher):
        eventually(lambda: len(spool) == 1 and pusher.pending() == 0, timeout=2, what="the failed batch on disk")
        for snapshot in taken[1:4]:
            pusher.enqueue(snapshot)
        eventually(lambda: flat(spooled(tmp_path)) == stamps_of(taken[:4]), timeout=2, what="the open batch on disk")
        open_file = sorted(tmp_path.glob("*" + SUFFIX))[-1]
        before = open_file.read_bytes()
        size_before = spool.size_bytes
        spool.full = True
        for snapshot in taken[4:7]:
            pusher.enqueue(snapshot)
        eventually(lambda: pusher.stats.spool_write_failures >= 2, timeout=2, what="rewrites to fail")
        eventually(lambda: pusher.pending() == 3, timeout=2, what="the new snapshots to wait in memory")
        assert open_file.read_bytes() == before and spool.size_bytes == size_before, "the last version stays"
        spool.full = False
        for snapshot in taken[7:]:
            pusher.enqueue(snapshot)
        eventually(lambda: flat(spooled(tmp_path)) == stamps_of(taken), timeout=2, what="the open batch to take all")
    batches = spooled(tmp_path)
    assert [len(stamps) for _, stamps in batches] == [1, 9], "still one open batch, grown"
    assert batches[1][0] == unpack(before)[0], "under the sequence number it had"

    collector = FakeCollector()
    with serving(collector, port):
        assert pusher.flush(time.monotonic() + 5)
        pusher.close()
    bodies = [body for _, body in collector.received]
    assert flat([unpack(body) for body in bodies]) == stamps_of(taken)
    assert [ts for body in bodies for ts in xids_of(body)] == stamps_of(taken), "each event once, with its snapshot"
    assert list(tmp_path.iterdir()) == []


def test_the_open_batch_is_closed_at_shutdown(tmp_path: Path) -> None:
    """A spill writes the open batch a last time and closes it: the flush after may send it."""
    pusher = new_pusher(f"http://127.0.0.1:{free_loopback_port()}", Spool(tmp_path), max_snapshots_per_batch=4)
    taken = snapshots(4)
    pusher.enqueue(taken[0])
    assert pusher.push_once() is False  # the failed batch on disk; nothing open yet
    pusher.enqueue(taken[1])
    assert pusher.spill() == 0
    pusher.enqueue(taken[2])
    pusher.enqueue(taken[3])
    assert pusher.spill() == 0
    batches = spooled(tmp_path)
    assert [len(stamps) for _, stamps in batches] == [1, 1, 2], "not grown after the spill that closed it"
    assert len({ident for ident, _ in batches}) == 3
