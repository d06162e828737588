"""What a collector outage may cost an exporter with --spool-dir: the batch in flight and what is sampled
meanwhile are on disk within a back-off tick, a killed exporter's successor replays them once, in order,
Retry-After is honoured, and a spool that cannot be written keeps the snapshots in memory.

Against a loopback HTTP server that stands in for the collector, or nothing at all (closed port)."""

from __future__ import annotations

import logging
import time
import uuid
from email.utils import formatdate
from pathlib import Path

import pytest

from gpuscope.core.listen import free_loopback_port
from gpuscope.exporter.pusher import parse_retry_after
from gpuscope.exporter.spool import SUFFIX, Spool
from tests.exporter.helpers import snapshots
from tests.exporter.push_harness import (
    FakeCollector,
    FullDisk,
    new_pusher,
    running,
    serving,
    spooled,
    stamps_of,
    unpack,
)
from tests.waiting import eventually


def test_the_batch_in_flight_is_on_disk_within_a_tick_of_its_first_failed_try(tmp_path: Path) -> None:
    """The operator's fault test: the first spool file came 60 s into the outage (a full batch had to queue)."""
    spool = Spool(tmp_path)
    pusher = new_pusher(f"http://127.0.0.1:{free_loopback_port()}", spool, push_interval=0.2)
    taken = snapshots(12)
    for snapshot in taken[:5]:
        pusher.enqueue(snapshot)
    with running(pusher):
        eventually(lambda: pusher.stats.failures > 0, timeout=2, what="the first try to fail (nothing listens)")
        failed_at = time.monotonic()
        eventually(lambda: len(spool) == 1 and pusher.pending() == 0, timeout=1, what="the batch to reach the spool")
        assert time.monotonic() - failed_at < 1.0
        for snapshot in taken[5:]:  # sampled during the outage: on disk at the next back-off tick
            pusher.enqueue(snapshot)
        eventually(lambda: pusher.pending() == 0, timeout=1.5, what="what was sampled meanwhile to reach the spool")
    batches = spooled(tmp_path)
    assert batches[0] == ((uuid.UUID(pusher._origin.exporter_id), 1), stamps_of(taken[:5]))
    assert [stamp for _, stamps in batches for stamp in stamps] == stamps_of(taken), "all of it, in order"
    seqs = [seq for (_, seq), _ in batches]
    assert seqs == sorted(set(seqs))


def test_a_restarted_exporter_replays_the_killed_ones_spool_once_and_in_order(tmp_path: Path) -> None:
    port = free_loopback_port()
    url = f"http://127.0.0.1:{port}"
    taken = snapshots(25)
    first = new_pusher(url, Spool(tmp_path), push_interval=0.2, max_snapshots_per_batch=4)
    for snapshot in taken[:10]:
        first.enqueue(snapshot)
    with running(first):  # the collector is away the whole time this exporter lives
        eventually(lambda: first.stats.failures > 0, timeout=2, what="the first try to fail")
        for snapshot in taken[10:]:
            first.enqueue(snapshot)
            time.sleep(0.02)
        eventually(lambda: first.pending() == 0, timeout=1.5, what="everything unsent to reach the spool")
    # ...then SIGKILL: `first` is abandoned as it is, and a new exporter starts on the same spool.
    on_disk = spooled(tmp_path)
    assert [stamp for _, stamps in on_disk for stamp in stamps] == stamps_of(taken)

    collector = FakeCollector()
    with serving(collector, port):
        second = new_pusher(url, Spool(tmp_path), push_interval=0.2)
        assert second.flush(time.monotonic() + 5)
        second.close()
    delivered = [unpack(body) for _, body in collector.received]
    assert [ident for ident, _ in delivered] == [ident for ident, _ in on_disk], "same (exporter_id, seq), in order"
    assert [stamp for _, stamps in delivered for stamp in stamps] == stamps_of(taken), "none missing, none twice"
    assert list(tmp_path.iterdir()) == []


def test_retry_after_is_waited_out(tmp_path: Path) -> None:
    collector = FakeCollector(script=[(503, "3")])
    with serving(collector) as url:
        pusher = new_pusher(url, Spool(tmp_path))
        pusher.enqueue(snapshots(1)[0])
        with running(pusher):
            eventually(lambda: len(collector.received) >= 2, timeout=6, what="the retry")
            eventually(lambda: not pusher.backlog(), timeout=2, what="the retried batch to be acknowledged")
        pusher.close()
    (first_at, first), (retry_at, retried) = collector.received
    assert retry_at - first_at >= 3.0, "the collector asked for 3 s"
    assert retry_at - first_at < 4.5, "jitter is a little, not another back-off"
    assert retried == first, "the same batch, under the same sequence number"


def test_retry_after_parsing() -> None:
    now = 1_790_000_000.0
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 120 ") == 120.0
    assert parse_retry_after(formatdate(now + 10, usegmt=True), now=now) == pytest.approx(10.0)
    assert parse_retry_after(formatdate(now - 10, usegmt=True), now=now) == 0.0, "a date past: no wait"
    assert parse_retry_after("86400") == 300.0, "capped"
    assert parse_retry_after("9" * 5000) == 300.0
    for garbage in (None, "", "soon", "-1", "1.5", "1e3", "nan", "inf", "\uff13"):
        assert parse_retry_after(garbage) is None, garbage  # "\uff13": a digit, but not ASCII


@pytest.mark.parametrize("disk_frees_first", [True, False], ids=["disk-then-collector", "collector-then-disk"])
def test_a_full_disk_keeps_the_snapshots_in_memory_until_they_can_go(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, disk_frees_first: bool
) -> None:
    port = free_loopback_port()
    spool = FullDisk(tmp_path)
    pusher = new_pusher(f"http://127.0.0.1:{port}", spool, push_interval=0.2, max_snapshots_per_batch=4)
    taken = snapshots(10)
    collector = FakeCollector()
    with caplog.at_level(logging.ERROR, logger="gpuscope.exporter.pusher"), running(pusher):
        for snapshot in taken:
            pusher.enqueue(snapshot)
            time.sleep(0.05)
        eventually(lambda: pusher.stats.spool_write_failures >= 3, timeout=3, what="the spool writes to fail")
        # (eventually: a tick holds the snapshots it is failing to write for a moment)
        eventually(lambda: pusher.pending() == len(taken) and len(spool) == 0, timeout=1, what="all of it in memory")
        assert len([r for r in caplog.records if "cannot write to the spool" in r.message]) == 1, "logged once"
        if disk_frees_first:
            spool.full = False
            eventually(lambda: pusher.pending() == 0, timeout=1.5, what="the snapshots to reach the spool")
        with serving(collector, port):
            eventually(lambda: not pusher.backlog(), timeout=6, what="everything to reach the collector")
        spool.full = False
    delivered = [unpack(body) for _, body in collector.received]
    assert [stamp for _, stamps in delivered for stamp in stamps] == stamps_of(taken), "none missing, none twice"
    idents = [ident for ident, _ in delivered]
    assert len(set(idents)) == len(idents)
    assert list(tmp_path.iterdir()) == []
    figures = {family.name: family for family in pusher.families()}
    assert "gpuscope_exporter_spool_write_failures" in figures


def test_every_caps_counter_is_exported(tmp_path: Path) -> None:
    spool = FullDisk(tmp_path, max_bytes=1)
    pusher = new_pusher(f"http://127.0.0.1:{free_loopback_port()}", spool, queue_limit=3, max_snapshots_per_batch=2)
    for snapshot in snapshots(5):
        pusher.enqueue(snapshot)
    assert pusher.push_once() is False
    assert pusher.stats.snapshots_dropped == 2 and pusher.stats.spool_write_failures == 1
    assert pusher.pending() == 3, "the spool failed: all that the queue holds is still in memory"
    spool.full = False
    assert pusher.spill() == 0
    assert spool.dropped_batches == 1 and len(spool) == 1 and pusher.pending() == 0
    names = {family.name for family in pusher.families()}
    assert {
        "gpuscope_exporter_dropped_snapshots",
        "gpuscope_exporter_spool_dropped_batches",
        "gpuscope_exporter_spool_write_failures",
    } <= names


def test_spool_names_keep_their_order_when_the_clock_is_behind_them(tmp_path: Path) -> None:
    """A batch spooled before a restart with the clock ahead (NTP stepped it back since) is still sent first."""
    ahead = tmp_path / f"{(time.time_ns() + 3_600 * 10**9):020d}-000000{SUFFIX}"
    ahead.write_bytes(b"older")
    spool = Spool(tmp_path)
    newer = spool.put(b"newer")
    assert sorted(tmp_path.glob("*" + SUFFIX)) == [ahead, newer]
    assert spool.oldest() == (ahead, b"older")
