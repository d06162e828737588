"""Fleet health's figures on the collector's /metrics: the jobs running on each node that is not healthy,
one series per such node with its state and why (the Node* rules in deploy/prometheus)."""

from __future__ import annotations

from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from psycopg import Connection

from gpuscope.health.reads import out_of_health


def node_health_metrics(conn: Connection[Any]) -> list[Metric]:
    family = GaugeMetricFamily(
        "gpuscope_node_health_jobs_running",
        "Jobs running on a node that is not healthy (one series per such node: its health state and why)",
        labels=["cluster", "node", "state", "reason"],
    )
    for node in out_of_health(conn):
        family.add_metric([node.cluster, node.node, node.state, node.reason], node.jobs)
    return [family]
