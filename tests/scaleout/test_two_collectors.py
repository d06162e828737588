"""Scale-out: two collector processes on one database. Exporters push to both; every batch is stored
once. One collector evaluates the alert rules; killed (SIGKILL), the other takes over, announces what
fires next, and does not announce again what was already sent."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from gpuscope.alerts.engine import DISPATCH_SHARD, LOCK_KEY
from gpuscope.core.listen import free_loopback_port
from gpuscope.exporter.node_exporter import ExporterConfig, NodeExporter
from gpuscope.exporter.sim import JobSchedule, SimNodeSource, build_topology
from tests import commands
from tests.alerts.receiver import ChatReceiver
from tests.alerts.rules import gpu_over_temperature
from tests.commands import stop_process
from tests.conftest import count_rows
from tests.waiting import eventually

TOKEN = "s" * 32
EVALUATIONS_AFTER = timedelta(seconds=3)  # the survivor's evaluations (interval 1 s) watched for a repeat


def start_collector(dsn: str, port: int, tmp_path: Path, notify: Path) -> subprocess.Popen[bytes]:
    rules = tmp_path / "rules.yaml"
    rules.write_text(gpu_over_temperature())
    extra = ("--rules", str(rules), "--notify-config", str(notify))
    return commands.start_collector(dsn, port, tmp_path / "token", *extra, timeout=60)


def leader_pid(dsn: str) -> int | None:
    """The process whose connection holds the alert engines' dispatch shard: it queues and delivers
    (collectors name their connections)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
            " WHERE l.locktype = 'advisory' AND l.granted AND ((l.classid::bigint << 32) | l.objid::bigint) = %s",
            (LOCK_KEY + 1 + DISPATCH_SHARD,),
        ).fetchone()
    return int(row[0].rsplit(" ", 1)[1]) if row else None


def database_now(dsn: str) -> datetime:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]


def last_evaluation(dsn: str) -> datetime | None:
    """When the leading engine last evaluated its rules (stored with each evaluation)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT max(evaluated_at) FROM alert_rule_status").fetchone()
    return row[0] if row else None


def undelivered(dsn: str) -> int:
    """Notifications in the outbox not yet delivered (pending: due, or waiting for a retry)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM alert_notification WHERE status = 'pending'").fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def receiver() -> Iterator[ChatReceiver]:
    with ChatReceiver() as chat:
        yield chat


def test_two_collectors_store_everything_once_and_hand_over_alerting(
    dsn: str, tmp_path: Path, receiver: ChatReceiver
) -> None:
    commands.token_file(tmp_path / "token", TOKEN)
    notify = tmp_path / "notify.yaml"
    notify.write_text(
        "route: {receiver: ops, group_by: [alertname, node], group_wait: 0s, group_interval: 1s}\n"
        f"receivers: [{{name: ops, kind: webhook, url: '{receiver.url}/hook', min_interval: 0s}}]\n"
    )
    ports = [free_loopback_port(), free_loopback_port()]
    collectors = [start_collector(dsn, port, tmp_path, notify) for port in ports]
    topology = build_topology(4, 4, 2, cluster="scale")
    sources = [SimNodeSource(node, JobSchedule(topology, 2), 2) for node in topology]

    def make_exporter(index: int, port: int) -> NodeExporter:
        node = topology[index]
        config = ExporterConfig(node.cluster, node.rack, node.name, interval=0.2, token=TOKEN, push_interval=0.4,
                                push_url=f"http://127.0.0.1:{port}")  # fmt: skip
        return NodeExporter(sources[index], config)

    exporters = [make_exporter(i, ports[i % 2]) for i in range(len(topology))]  # interleaved over both collectors
    try:
        for exporter in exporters:
            exporter.start()

        def pushing_and_led() -> bool:
            assert all(e.pusher and e.pusher.stats.snapshots_sent for e in exporters), "every exporter has pushed"
            return leader_pid(dsn) in {c.pid for c in collectors}

        eventually(pushing_and_led, timeout=30, what="every exporter to push and one collector to lead alerting")
        sources[0].fail_cooling(1, 60.0)
        (first,) = receiver.wait_for("/hook", 1, timeout=20)
        assert first.body["groupLabels"] == {"alertname": "GpuOverTemperature", "node": topology[0].name}
        for exporter in exporters:  # the pushers drain: everything sent is acknowledged
            exporter.stop()
        sent = sum(e.pusher.stats.snapshots_sent for e in exporters if e.pusher) * 4
        assert sent > 0 and count_rows(dsn, "gpu_sample") == sent, "every batch stored exactly once"

        leader = leader_pid(dsn)
        assert leader in {c.pid for c in collectors}, "one of the two collectors leads"
        survivor = next(i for i, c in enumerate(collectors) if c.pid != leader)
        os.kill(leader, signal.SIGKILL)  # no clean shutdown: its connections just go
        killed_at = time.monotonic()
        # Alerting goes on in the survivor: a GPU on a node pushing to it overheats.
        hot = next(i for i in range(len(exporters)) if i % 2 == survivor)
        sources[hot].fail_cooling(2, 60.0)
        late = make_exporter(hot, ports[survivor])
        still = make_exporter(0, ports[survivor])  # node 0 is still hot: its alert must not be announced again
        late.start()
        still.start()
        try:
            _, second = receiver.wait_for("/hook", 2, timeout=30)
            took = time.monotonic() - killed_at
            assert leader_pid(dsn) == collectors[survivor].pid
            assert second.body["groupLabels"]["node"] == topology[hot].name
            assert took < 15, f"the survivor took {took:.1f} s to take over and announce"
            # Something that must NOT happen: a few more evaluations by the survivor, and whatever they queued
            # delivered, and still only the two announcements (counted, not slept on: a loaded machine
            # evaluates less often).
            announced = database_now(dsn)
            eventually(
                lambda: (last := last_evaluation(dsn)) is not None and last >= announced + EVALUATIONS_AFTER,
                timeout=30,
                what="the survivor to evaluate its rules for a few more seconds",
            )
            eventually(lambda: undelivered(dsn) == 0, timeout=30, what="the outbox to be delivered")
            assert len(receiver.at("/hook")) == 2, "node 0's alert, already announced, is not announced again"
        finally:
            late.stop()
            still.stop()
    finally:
        for exporter in exporters:
            exporter.stop()
        for process in collectors:
            stop_process(process)
