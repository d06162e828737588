"""The embedded PostgreSQL killed under a collector that is taking batches: the collector notices,
reaps it, starts it again on the same data directory, and ingest resumes with no operator. Meanwhile
every batch is answered at once (503 with the cause and Retry-After), and nothing acknowledged is lost."""

from __future__ import annotations

import signal
import time

import httpx

from tests.exporter.helpers import stored_rows
from tests.faults.harness import Collector, Feeder, gone
from tests.waiting import eventually

RECOVERY_S = 15.0  # the target: ingest back within 15 s of the kill
ANSWER_S = 1.0  # while the database is away, every batch is answered within this


def test_postmaster_sigkill_is_restarted_and_nothing_acknowledged_is_lost(collector: Collector) -> None:
    feeder = Feeder(collector.url).start()
    eventually(lambda: feeder.acked_batches >= 20, what="batches acknowledged before the fault", timeout=20)
    victim = collector.postmaster_pid()
    killed = time.monotonic()
    os_kill(victim)

    def answering_again() -> bool:
        return any(a.status == 200 for a in feeder.answers_since(killed + 0.5))

    eventually(answering_again, what="ingest back after the postmaster was killed", timeout=RECOVERY_S + 5)
    during = feeder.answers_since(killed)
    back = next(a.at for a in during if a.status == 200 and a.at > killed + 0.5) - killed
    refusals = [a for a in during if a.status == 503]
    assert back <= RECOVERY_S, f"ingest back {back:.1f} s after the kill"
    assert refusals, "the outage was felt by the feeder"
    assert max(a.took for a in refusals) <= ANSWER_S, f"a 503 took {max(a.took for a in refusals):.2f} s"
    assert not [a for a in during if a.status == 0], "every batch got an answer"
    assert all(any(c in a.detail for c in ("database restarting", "database unreachable")) for a in refusals), {
        a.detail for a in refusals
    }
    assert gone(victim), "the dead postmaster was reaped, not left a zombie"
    assert collector.postmaster_pid() != victim
    assert "embedded PostgreSQL was killed by signal 9; starting it again" in collector.log_text()

    feeder.stop()
    assert stored_rows(collector.dsn()) == (feeder.acked_rows, feeder.acked_rows)
    print(f"postmaster SIGKILL: ingest back after {back:.1f} s, slowest 503 {max(a.took for a in refusals):.3f} s")


def test_health_names_the_cause_while_the_database_is_away(collector: Collector) -> None:
    victim = collector.postmaster_pid()
    os_kill(victim)
    seen = eventually(lambda: _unhealthy(collector), what="/healthz to say unhealthy", timeout=5)
    assert seen["cause"] in ("database restarting", "database unreachable"), seen

    def restarted_and_healthy() -> bool:
        return collector.postmaster_pid() != victim and collector.health()[0] == 200

    # The pid file is missing for a moment while the new postmaster starts.
    eventually(
        restarted_and_healthy,
        what="a new postmaster and /healthz 200",
        timeout=RECOVERY_S,
        ignoring=(AssertionError, FileNotFoundError),
    )
    metrics = httpx.get(f"{collector.url}/metrics", timeout=5).text
    states = [line for line in metrics.splitlines() if line.startswith("gpuscope_collector_database_state{")]
    assert 'gpuscope_collector_database_state{state="ok"} 1.0' in states, (states, collector.log_text())


def _unhealthy(collector: Collector) -> dict[str, object] | None:
    status, body = collector.health()
    return body if status == 503 else None


def os_kill(pid: int) -> None:
    import os

    os.kill(pid, signal.SIGKILL)
