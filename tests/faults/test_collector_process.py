"""The collector process itself hurt: SIGKILLed and started again at once on the same data directory
(its embedded server may still be shutting down), frozen with SIGSTOP, and told to stop while its
database is away or hung. Each ends with every acknowledged row stored once."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from tests.exporter.helpers import stored_rows
from tests.faults.harness import Collector, Feeder, postgres_pids
from tests.waiting import eventually

STOP_S = 10.0  # SIGTERM: gone within this, whatever the database is doing


def test_collector_sigkill_then_immediate_restart(collector: Collector) -> None:
    feeder = Feeder(collector.url).start()
    eventually(lambda: feeder.acked_batches >= 20, what="batches acknowledged before the fault", timeout=20)
    collector.signal(signal.SIGKILL)
    assert collector.process is not None
    collector.process.wait(10)
    began = time.monotonic()
    collector.restart(timeout=40)  # no pause: the old server got its parent-death signal a moment ago
    took = time.monotonic() - began
    eventually(lambda: feeder.acked_batches >= 40, what="batches acknowledged after the restart", timeout=20)
    feeder.stop()
    assert 'lock file "postmaster.pid" already exists' not in collector.log_text()
    assert stored_rows(collector.dsn()) == (feeder.acked_rows, feeder.acked_rows)
    print(f"collector SIGKILL: healthy again {took:.1f} s after an immediate restart")


def test_collector_frozen_and_thawed(collector: Collector) -> None:
    feeder = Feeder(collector.url).start()
    eventually(lambda: feeder.acked_batches >= 20, what="batches acknowledged before the fault", timeout=20)
    collector.signal(signal.SIGSTOP)
    time.sleep(3.0)  # the scenario is time passing: frozen a while, requests pile up unanswered
    collector.signal(signal.SIGCONT)
    thawed = feeder.acked_batches
    eventually(lambda: feeder.acked_batches >= thawed + 20, what="batches acknowledged after SIGCONT", timeout=20)
    feeder.stop()
    assert stored_rows(collector.dsn()) == (feeder.acked_rows, feeder.acked_rows)


def test_sigterm_while_the_database_is_hung(collector: Collector) -> None:
    """Every process of the database frozen: connections open, nothing answers (a hung host)."""
    feeder = Feeder(collector.url).start()
    eventually(lambda: feeder.acked_batches >= 10, what="batches acknowledged before the fault", timeout=20)
    pgdata = collector.data_dir / "pgdata"
    with frozen(pgdata):
        time.sleep(2.0)  # requests are now waiting on the hung server
        took = collector.stop(timeout=STOP_S + 5)
    assert took <= STOP_S, f"SIGTERM took {took:.1f} s"
    feeder._stop.set()  # its last batch may never be acknowledged now: the collector is gone
    acked = feeder.acked_rows
    collector.restart(timeout=60)
    feeder.url = collector.url
    feeder.stop()  # the pending batch goes to the restarted collector
    assert stored_rows(collector.dsn()) == (feeder.acked_rows, feeder.acked_rows)
    assert feeder.acked_rows >= acked
    print(f"SIGTERM with the database hung: exited after {took:.1f} s")


def test_sigterm_while_the_database_is_restarting(collector: Collector) -> None:
    os.kill(collector.postmaster_pid(), signal.SIGKILL)
    time.sleep(0.3)  # the scenario: SIGTERM comes while the supervisor is restarting the server, not before
    took = collector.stop(timeout=STOP_S + 5)
    assert took <= STOP_S, f"SIGTERM took {took:.1f} s"
    eventually(lambda: not postgres_pids(collector.data_dir / "pgdata"), what="no server left behind", timeout=10)


@contextmanager
def frozen(pgdata: Path) -> Iterator[None]:
    pids = postgres_pids(pgdata)
    assert pids, "the database runs"
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
