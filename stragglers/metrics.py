"""The straggler watch's figures on the collector's /metrics: each active straggler's slowdown as a gauge,
so that sites alerting with Prometheus see them too (the JobStraggler rule in deploy/prometheus)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from psycopg import Connection

from gpuscope.collector.query.timerange import TimeRange
from gpuscope.stragglers.reads import stragglers

WINDOW = timedelta(days=30)  # an open episode is active whenever it began: the range needs only to end now


def straggler_metrics(conn: Connection[Any]) -> list[Metric]:
    family = GaugeMetricFamily(
        "gpuscope_straggler_slowdown_ratio",
        "Estimated slowdown of a running job caused by this node or GPU (active stragglers only)",
        labels=["job_id", "cluster", "node", "gpu", "cause"],
    )
    now = datetime.now(UTC)
    for row in stragglers(conn, TimeRange(now - WINDOW, now), active_only=True):
        gpu = "" if row.gpu is None else str(row.gpu)
        family.add_metric([row.job_id, row.cluster, row.node or "", gpu, row.cause], row.slowdown)
    return [family]
