"""A collector on a database of its own (--db) that goes away and comes back: batches are refused at once
meanwhile (503 with Retry-After), ingest resumes by itself with no collector restart, nothing
acknowledged is lost; and a server that could lose committed transactions is warned about at start."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuscope.core.embedded_pg import EmbeddedPostgres
from tests.conftest import FAST_UNSAFE, running_postgres
from tests.exporter.helpers import stored_rows
from tests.faults.harness import Collector, Feeder
from tests.waiting import eventually


@pytest.fixture
def server() -> Iterator[EmbeddedPostgres]:
    """The "external" server: ours to stop and start, with fsync and synchronous_commit off."""
    with running_postgres("gpuscope-fault-external-") as running:
        assert FAST_UNSAFE["fsync"] == "off"
        yield running


def test_ingest_resumes_by_itself_after_the_server_returns(server: EmbeddedPostgres, data_dir: Path) -> None:
    collector = Collector.start(data_dir / "collector", "--no-alerts", "--db", server.dsn)
    try:
        feeder = Feeder(collector.url).start()
        eventually(lambda: feeder.acked_batches >= 20, what="batches acknowledged before the outage", timeout=20)
        server.stop()
        down = time.monotonic()

        # The server stays away a while: batches keep coming and every one is refused (counted, not slept
        # on: a loaded machine sends fewer), the last ones saying why.
        def refused_a_while() -> bool:
            refused = [a for a in feeder.answers_since(down) if a.status == 503]
            return len(refused) >= 20 and "database unreachable" in refused[-1].detail

        eventually(refused_a_while, what="twenty batches refused while the server is away", timeout=30)
        during = feeder.answers_since(down)
        refusals = [a for a in during if a.status == 503]
        assert refusals and not [a for a in during if a.status == 200]
        assert max(a.took for a in refusals) <= 1.0, f"a refusal took {max(a.took for a in refusals):.2f} s"
        assert "database unreachable" in refusals[-1].detail, refusals[-1].detail
        status, body = collector.health()
        assert (status, body["cause"]) == (503, "database unreachable"), body

        server.start()
        up = time.monotonic()
        eventually(lambda: any(a.status == 200 for a in feeder.answers_since(up)), what="ingest back", timeout=15)
        back = next(a.at for a in feeder.answers_since(up) if a.status == 200) - up
        feeder.stop()
        assert collector.process is not None and collector.process.poll() is None, "no restart was needed"
        assert stored_rows(server.dsn) == (feeder.acked_rows, feeder.acked_rows)
        warnings = collector.log_text()
        assert "the database runs with fsync=off" in warnings
        assert "the database runs with synchronous_commit=off" in warnings
        print(f"--db server stopped 4 s: slowest refusal {max(a.took for a in refusals):.3f} s, back {back:.1f} s")
    finally:
        collector.stop()
