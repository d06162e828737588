"""Leader work across a failover: two collectors on the multi-host DSN share the alert engine and the
health loop (shard leases: advisory locks on each one's own connection, gpuscope/core/shards.py; the
holder of alert shard 0 queues and delivers notifications). The primary's postmaster is SIGKILLed while
an alert fires and a node turns unhealthy; every lease goes with its connection, and whoever takes the
shards on the new primary picks up from the database (alert_instance, alert_group, the
alert_notification outbox; health_node, health_evidence): the firing alert is not announced again, its
resolve after the failover is announced once, and each node's transition to unhealthy is stored once."""

from __future__ import annotations

import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
import yaml

from gpuscope.core.ingest_wire import BINARY_CONTENT_TYPE
from gpuscope.exporter.events import Event
from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, Snapshot
from gpuscope.exporter.wire import Origin, encode_binary
from tests.alerts.receiver import ChatReceiver, Received
from tests.alerts.rules import HOT
from tests.patroni.cluster import PatroniCluster
from tests.processes import RunningCollector, running_collector
from tests.waiting import eventually

HOOK = "/hook"
HEALTH_POLICY = {"dry_run": True, "every_s": 0.5, "lag_s": 1}  # dry run: unhealthy, never drained
QUIET_S = 4.0  # a window, after the new leader is at work, for a notification or transition that must not come


def notify_config(url: str) -> dict[str, Any]:
    """One notification per change of a node's group; the repeat (1 h) never comes within the test."""
    route = {"group_by": ["node"], "group_wait": "0s", "group_interval": "1s", "repeat_interval": "1h"}
    return {
        "route": {"receiver": "ops", **route},
        "receivers": [{"name": "ops", "kind": "webhook", "url": url, "min_interval": "0s"}],
    }


class Node:
    """One exporter: a GPU at a temperature, each batch sent again with its seq until acknowledged."""

    def __init__(self, name: str, collectors: tuple[RunningCollector, ...]) -> None:
        self.origin = Origin("ha", "r1", name, "sim", str(uuid.uuid4()))
        self.gpu = GpuIdentity(0, f"GPU-{self.origin.exporter_id}", "NVIDIA H100", "00:01")
        self.collectors = collectors
        self.seq = 0

    def push(self, temp_c: float, events: tuple[Event, ...] = (), timeout: float = 60.0) -> None:
        snapshot = Snapshot(time.time(), (GpuReading(self.gpu, True, {"temp_c": temp_c, "util_pct": 50.0}),), ())
        body = encode_binary(self.origin, self.seq, [snapshot], events)
        deadline, answer = time.monotonic() + timeout, ""
        while time.monotonic() < deadline:
            collector = self.collectors[self.seq % len(self.collectors)]
            headers = {"Authorization": f"Bearer {collector.token}", "Content-Type": BINARY_CONTENT_TYPE}
            response = httpx.post(f"{collector.url}/api/v1/samples", content=body, headers=headers, timeout=30)
            if response.status_code == 200:
                self.seq += 1
                return
            assert response.status_code == 503, response.text
            answer = response.text
            time.sleep(0.2)
        raise AssertionError(f"batch {self.seq} of {self.origin.node} not taken in {timeout:.0f} s: {answer}")

    def xid_79(self) -> tuple[Event, ...]:
        return (Event(time.time(), 0, "xid", 79),)


def test_alerts_and_health_transitions_resume_on_the_new_primary_once(
    patroni_cluster: PatroniCluster, tmp_path: Path
) -> None:
    cluster = patroni_cluster
    cluster.wait_healthy(120)
    policy = tmp_path / "health.yaml"
    policy.write_text(yaml.safe_dump(HEALTH_POLICY))
    with ChatReceiver() as receiver:
        notify = notify_config(receiver.url + HOOK)
        settings: dict[str, Any] = {"alert_tick_s": 0.1, "health": True, "health_policy": policy}
        with (
            running_collector(cluster.dsn(), rules=HOT, notify=notify, **settings) as first,
            running_collector(cluster.dsn(), rules=HOT, notify=notify, **settings) as second,
        ):
            collectors = (first, second)
            hot = Node("leader-hot", collectors)
            before = Node("leader-xid-before", collectors)  # unhealthy before the failover
            across = Node("leader-xid-across", collectors)  # its XID pushed just before the kill
            hot.push(95.0)
            before.push(40.0)
            across.push(40.0)
            (firing,) = receiver.wait_for(HOOK, 1, timeout=30)
            assert alert_statuses(firing) == ["firing"], firing.body
            eventually(lambda: sent_notifications(cluster) == 1, timeout=10, interval=0.2, what="it marked sent")

            before.push(40.0, before.xid_79())
            eventually(lambda: transitions(cluster, before) == [("healthy", "unhealthy")], timeout=30, interval=0.3,
                       what=f"{before.origin.node} unhealthy")  # fmt: skip
            across.push(40.0, across.xid_79())
            old = cluster.wait_for_primary()
            cluster.kill_postmaster(old)
            killed = time.monotonic()
            new = cluster.wait_for_primary(60, not_in={old})
            print(f"postmaster of {old} killed: {new} primary after {time.monotonic() - killed:.1f} s")

            hot.push(95.0)  # still hot, through the new primary
            after_failover = database_now(cluster)
            eventually(lambda: rules_evaluated_at(cluster) > after_failover, timeout=30, interval=0.3,
                       what="the alert engine evaluating on the new primary")  # fmt: skip
            eventually(lambda: transitions(cluster, across) == [("healthy", "unhealthy")], timeout=30, interval=0.3,
                       what=f"{across.origin.node} unhealthy")  # fmt: skip
            time.sleep(QUIET_S)
            assert [alert_statuses(r) for r in receiver.at(HOOK)] == [["firing"]], "the firing alert announced again"

            hot.push(30.0)  # cooled: resolved, announced once by the new leader
            _, resolved = receiver.wait_for(HOOK, 2, timeout=30)
            assert alert_statuses(resolved) == ["resolved"], resolved.body
            time.sleep(QUIET_S)
            assert [alert_statuses(r) for r in receiver.at(HOOK)] == [["firing"], ["resolved"]]
            assert sent_notifications(cluster) == 2
            for node in (before, across):
                assert transitions(cluster, node) == [("healthy", "unhealthy")], f"{node.origin.node}: stored once"
    cluster.wait_healthy(120)  # the killed node rejoins as a standby, for the module's next test


def alert_statuses(received: Received) -> list[str]:
    return [alert["status"] for alert in received.body["alerts"]]


def sent_notifications(cluster: PatroniCluster) -> int:
    with psycopg.connect(cluster.dsn(), connect_timeout=3) as conn:
        row = conn.execute("SELECT count(*) FROM alert_notification WHERE status = 'sent'").fetchone()
    return int(row[0]) if row else 0


def transitions(cluster: PatroniCluster, node: Node) -> list[tuple[str, str]]:
    with psycopg.connect(cluster.dsn(), connect_timeout=3) as conn:
        rows = conn.execute(
            "SELECT t.from_state, t.to_state FROM health_transition t JOIN node n USING (node_id)"
            " WHERE n.name = %s ORDER BY t.at",
            (node.origin.node,),
        ).fetchall()
    return [(str(a), str(b)) for a, b in rows]


def database_now(cluster: PatroniCluster) -> datetime:
    with psycopg.connect(cluster.dsn(), connect_timeout=3) as conn:
        row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]


def rules_evaluated_at(cluster: PatroniCluster) -> datetime:
    with psycopg.connect(cluster.dsn(), connect_timeout=3) as conn:
        row = conn.execute("SELECT max(evaluated_at) FROM alert_rule_status").fetchone()
    assert row is not None and row[0] is not None
    return row[0]
