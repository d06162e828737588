"""One straggler, one place in words: the pages and the API say it through stragglers/reads.py
(culprit_words), the alert rules through alerts/views.sql's alerting.stragglers. Each kind of finding
(a GPU, a NIC port, a node, the fabric, another job's traffic) reads the same both ways."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg

from gpuscope.alerts import views
from gpuscope.collector.query.timerange import TimeRange
from gpuscope.stragglers.reads import stragglers
from tests.alerts.telemetry import add_node

NOW = datetime.now(UTC)


def test_the_views_culprit_is_the_pages_culprit(dsn: str) -> None:
    gpus = add_node(dsn, "node-005", gpus=2, ports=1)
    views.apply(dsn)
    with psycopg.connect(dsn) as conn:
        node_id, port_id = conn.execute("SELECT node_id, port_id FROM ib_port").fetchone()  # type: ignore[misc]
        findings = [  # job, node, gpu, port, cause, aggressor
            ("j-gpu", node_id, gpus[1], None, "thermal", None),
            ("j-nic", node_id, None, port_id, "nic", None),
            ("j-node", node_id, None, None, "unknown", None),
            ("j-fabric", None, None, None, "fabric", None),
            ("j-victim", None, None, None, "fabric", "j-loud"),
        ]
        for job, node, gpu, port, cause, aggressor in findings:
            conn.execute(
                "INSERT INTO straggler (job_id, cluster, node_id, gpu_id, port_id, cause, slowdown, started_at,"
                " declared_at, aggressor_job) VALUES (%s, 'test', %s, %s, %s, %s, 0.2, %s, %s, %s)",
                (job, node, gpu, port, cause, NOW - timedelta(minutes=5), NOW, aggressor),
            )
        in_sql = dict(conn.execute("SELECT job_id, culprit FROM alerting.stragglers").fetchall())
        in_python = {row.job_id: row.culprit for row in stragglers(conn, TimeRange(NOW - timedelta(hours=1), NOW))}
    assert in_python == {
        "j-gpu": "node-005 GPU 1",
        "j-nic": "node-005 NIC mlx5_0 port 1",
        "j-node": "node-005",
        "j-fabric": "the fabric",
        "j-victim": "job j-loud's traffic",
    }
    assert in_sql == in_python
