"""The collector notes each node's pushes (node_seen), and the default ExporterDown rule uses it."""

from __future__ import annotations

import asyncio
import datetime as dt

import psycopg

from gpuscope.alerts import views
from gpuscope.alerts.engine import AlertEngine
from gpuscope.alerts.rules import default_rules_text, parse_rules
from gpuscope.exporter.node_exporter import ExporterConfig, NodeExporter
from gpuscope.exporter.sim import JobSchedule, SimNodeSource, build_topology
from tests.processes import RunningCollector
from tests.waiting import eventually


def test_pushes_are_noted_and_a_silent_exporter_is_down(collector: RunningCollector) -> None:
    topology = build_topology(2, 2, 1, cluster="seen")
    exporters = [
        NodeExporter(
            SimNodeSource(node, JobSchedule(topology, 1), 1),
            ExporterConfig(
                "seen",
                node.rack,
                node.name,
                interval=0.1,
                push_url=collector.url,
                token=collector.token,
                push_interval=0.3,
            ),
        )
        for node in topology
    ]

    def noted() -> bool:
        with psycopg.connect(collector.dsn) as conn:
            seen = conn.execute(
                "SELECT n.name, extract(epoch FROM now() - s.last_seen), s.push_interval_s"
                " FROM node_seen s JOIN node n USING (node_id) ORDER BY 1"
            ).fetchall()
        assert [name for name, _, _ in seen] == [node.name for node in topology]
        for _, age, interval in seen:
            assert age < 2.0
            assert interval is not None and 0.2 <= interval <= 0.6, "the smoothed push interval follows --push-interval"
        return True

    for exporter in exporters:
        exporter.start()
    try:
        # Several pushes each, so that the interval is smoothed over more than one or two.
        eventually(
            lambda: all(e.pusher and e.pusher.stats.batches_sent >= 5 for e in exporters), what="five pushes a node"
        )
        eventually(noted, timeout=15, what="both nodes' pushes noted, at about the push interval")
    finally:
        for exporter in exporters:
            exporter.stop()
    noted()  # and still so once they stopped

    views.apply(collector.dsn)
    with psycopg.connect(collector.dsn) as conn:  # the first node has been silent for 20 s
        conn.execute(
            "UPDATE node_seen SET last_seen = now() - interval '20 seconds'"
            " WHERE node_id = (SELECT node_id FROM node WHERE name = %s)",
            (topology[0].name,),
        )
    engine = AlertEngine([g for g in parse_rules(default_rules_text()) if g.name == "exporters"], None)

    async def cycle() -> None:
        async with await psycopg.AsyncConnection.connect(collector.dsn, autocommit=True) as conn:
            await engine.cycle(conn, dt.datetime.now(dt.UTC))

    asyncio.run(cycle())
    (down,) = engine.instances.values()
    assert down.labels["node"] == topology[0].name and down.state == "firing"
    assert down.annotations["summary"].startswith(f"No telemetry from {topology[0].name} for 2")
