"""Faults while exporters keep pushing: the collector killed with SIGKILL, PostgreSQL restarted.
Rows stored must equal rows produced, with no duplicates."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.core.listen import free_loopback_port as free_port
from gpuscope.exporter.node_exporter import ExporterConfig, NodeExporter
from gpuscope.exporter.sim import JobSchedule, SimNodeSource, build_topology
from tests.commands import start_collector, token_file
from tests.conftest import running_postgres
from tests.exporter.helpers import stored_rows
from tests.waiting import eventually

TOKEN = "fault-token-0123456789"
GPUS = 4


@pytest.fixture
def private_postgres() -> Iterator[EmbeddedPostgres]:
    """A server of this test's own: it gets restarted."""
    with running_postgres("gpuscope-fault-pg-") as server:
        yield server


def exporters(port: int, spool: Path, nodes: int = 3) -> list[NodeExporter]:
    topology = build_topology(nodes, GPUS, 1, cluster="fault")
    schedule = JobSchedule(topology, 5)
    return [
        NodeExporter(
            SimNodeSource(node, schedule, 5),
            ExporterConfig(
                node.cluster,
                node.rack,
                node.name,
                interval=0.05,
                push_url=f"http://127.0.0.1:{port}",
                push_interval=0.5,
                token=TOKEN,
                spool_dir=spool / node.name,
                max_snapshots_per_batch=5,
            ),
        )
        for node in topology
    ]


def sent(nodes: list[NodeExporter]) -> list[int]:
    """Snapshots each node's collector has acknowledged so far."""
    return [node.pusher.stats.snapshots_sent if node.pusher else 0 for node in nodes]


def failures(nodes: list[NodeExporter]) -> int:
    """Pushes that failed so far, all nodes together."""
    return sum(node.pusher.stats.failures for node in nodes if node.pusher)


def run_through(fault, dsn: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tokens = token_file(tmp_path / "token", TOKEN)
    port = free_port()
    collector = start_collector(dsn, port, tokens)
    nodes = exporters(port, tmp_path / "spool")
    for node in nodes:
        node.start()

    def pushes_fail() -> None:
        """The fault lasts until the exporters feel it: pushes fail, and batches pile up meanwhile."""
        before = failures(nodes)
        eventually(lambda: failures(nodes) > before, timeout=15, what="a push to fail under the fault")

    try:
        eventually(lambda: all(sent(nodes)), timeout=15, what="every exporter to push before the fault")
        collector = fault(collector, lambda: start_collector(dsn, port, tokens), pushes_fail)
        after_fault = sent(nodes)

        def recovered() -> bool:
            assert failures(nodes) > 0, "the fault is felt"
            return all(now > then for now, then in zip(sent(nodes), after_fault, strict=True))

        eventually(recovered, timeout=20, what="every exporter to push again after the fault")
    finally:
        for node in nodes:
            node.stop(flush_seconds=20)
        collector.send_signal(signal.SIGTERM)
        collector.wait(30)
    produced = sum(node.sampler.cycles for node in nodes) * GPUS
    assert produced > 0
    assert failures(nodes) > 0, "the fault must have been felt"
    assert stored_rows(dsn) == (produced, produced), "every produced row stored exactly once"


def test_collector_killed_mid_ingest(private_postgres: EmbeddedPostgres, tmp_path: Path) -> None:
    def kill_and_restart(collector, restart, pushes_fail):  # type: ignore[no-untyped-def]
        collector.send_signal(signal.SIGKILL)  # no shutdown of any kind: in-flight requests die with it
        collector.wait(10)
        pushes_fail()  # the scenario: the collector stays away a while, pushes fail and batches pile up
        return restart()

    run_through(kill_and_restart, private_postgres.dsn, tmp_path)


def test_postgres_restarted_mid_ingest(private_postgres: EmbeddedPostgres, tmp_path: Path) -> None:
    def restart_database(collector, _restart, pushes_fail):  # type: ignore[no-untyped-def]
        private_postgres.stop()
        pushes_fail()  # the scenario: the database stays down a while under the pushing exporters
        private_postgres.start()
        return collector

    run_through(restart_database, private_postgres.dsn, tmp_path)
    with psycopg.connect(private_postgres.dsn) as conn:
        assert conn.execute("SELECT count(*) FROM node").fetchone() == (3,)
