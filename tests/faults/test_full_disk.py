"""The embedded database's disk fills up under ingest, then space is freed: the collector says "disk
full" (in the 503, /healthz and /metrics) instead of "database unavailable", and takes batches again
once there is room, having lost nothing it acknowledged. The data directory is a size-limited tmpfs."""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.exporter.helpers import stored_rows
from tests.faults.harness import Collector, Feeder
from tests.waiting import eventually

DISK = "192m"  # PostgreSQL 15's initdb takes ~40 MB, its WAL segments 16 MB each


@pytest.fixture
def small_disk(data_dir: Path) -> Iterator[Path]:
    mount_point = data_dir / "db"
    mount_point.mkdir()
    if os.geteuid() != 0:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("the full-disk case mounts a tmpfs: CI runs the suite as root")
        pytest.skip("mounting a tmpfs needs root")
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK},mode=0711", "tmpfs", str(mount_point)], check=True)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_full_disk_is_named_and_recovered_from(small_disk: Path) -> None:
    collector = Collector.start(small_disk, "--no-alerts")
    try:
        feeder = Feeder(collector.url).start()
        eventually(lambda: feeder.acked_batches >= 20, what="batches acknowledged before the disk fills", timeout=20)
        filler = small_disk / "filler"
        filled = time.monotonic()
        fill(filler)

        def refused_for_a_full_disk() -> bool:
            return any("disk full" in a.detail for a in feeder.answers_since(filled) if a.status == 503)

        eventually(refused_for_a_full_disk, what="a 503 naming the full disk", timeout=30)
        # The disk stays full a while: every batch meanwhile is refused at once, saying why (counted, not
        # slept on: a loaded machine sends fewer).
        eventually(lambda: len([a for a in feeder.answers_since(filled) if a.status == 503]) >= 20,
                   what="twenty batches refused while the disk is full", timeout=30)  # fmt: skip
        status, body = collector.health()
        assert (status, body["cause"]) == (503, "disk full"), body
        assert "MiB free in" in body["reason"], body
        metrics = httpx.get(f"{collector.url}/metrics", timeout=5).text
        assert 'gpuscope_collector_database_state{state="disk_full"} 1.0' in metrics
        refusals = [a for a in feeder.answers_since(filled) if a.status == 503]
        assert all("disk full" in a.detail for a in refusals[1:]), {a.detail for a in refusals}
        assert max(a.took for a in refusals) <= 1.0, f"a refusal took {max(a.took for a in refusals):.2f} s"

        filler.unlink()
        freed = time.monotonic()
        eventually(lambda: any(a.status == 200 for a in feeder.answers_since(freed)), what="ingest back", timeout=30)
        back = next(a.at for a in feeder.answers_since(freed) if a.status == 200) - freed
        eventually(lambda: collector.health()[0] == 200, what="/healthz 200 once space is freed", timeout=15)
        feeder.stop()
        assert stored_rows(collector.dsn()) == (feeder.acked_rows, feeder.acked_rows)
        print(f"disk full: {len(refusals)} batches refused naming it, ingest back {back:.1f} s after space was freed")
    finally:
        collector.stop()


def fill(path: Path) -> None:
    """Write until the file system refuses: no space left for anyone."""
    chunk = b"\0" * 2**20
    with path.open("wb", buffering=0) as out:
        while True:
            try:
                out.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    with path.open("ab", buffering=0) as out:  # the last partial chunk's worth, byte by byte in 4 KiB steps
        while True:
            try:
                out.write(b"\0" * 4096)
            except OSError:
                break
