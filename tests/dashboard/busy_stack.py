"""The busy little cluster (busy_cluster.py) behind a real collector with the shipped rules' queries firing,
and two dashboards over it: one open, one behind basic auth (user ada). For the alerts page's tests and
the screenshots of every page."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.dashboard.auth import hash_password
from gpuscope.dashboard_process import DashboardSettings
from tests.conftest import new_database, require_tool
from tests.dashboard import busy_cluster
from tests.dashboard.helpers import running_dashboard
from tests.processes import running_collector
from tests.waiting import eventually

# The shipped rules' queries (alerts/default_rules.yaml), evaluated every second and firing at once.
RULES = """
groups:
  - name: gpu
    interval: 1s
    rules:
      - alert: GpuOverTemperature
        expr: SELECT cluster, rack, node, gpu, uuid, temp_c AS value FROM gpu_latest WHERE temp_c >= 85
        labels: {severity: warning}
        annotations:
          summary: "GPU {{ $labels.gpu }} on {{ $labels.node }} is at {{ $value | printf \\"%.0f\\" }} °C"
      - alert: GpuXidError
        expr: |
          SELECT cluster, rack, node, gpu, uuid, code AS xid, 'critical' AS severity, sum(count) AS value
          FROM events WHERE kind = 'xid' AND ts > now() - interval '10 minutes'
          GROUP BY cluster, rack, node, gpu, uuid, code
        annotations:
          summary: "XID {{ $labels.xid }} on GPU {{ $labels.gpu }} of {{ $labels.node }}"
      - alert: GpuIdleInJob
        expr: |
          SELECT j.job_id, j.user, j.namespace, j.pod, g.cluster, g.node, g.gpu, g.uuid, g.util_pct AS value
          FROM job_gpus j JOIN gpu_latest g USING (gpu_id) WHERE j.running AND g.util_pct < 5
        labels: {severity: info}
        annotations:
          summary: "Job {{ $labels.job_id }} has left GPU {{ $labels.gpu }} on {{ $labels.node }} idle"
      - alert: JobStraggler
        expr: SELECT job_id, cluster, node, gpu, uuid, cause, slowdown * 100 AS value FROM stragglers WHERE active
        labels: {severity: warning}
        annotations:
          summary: "Job {{ $labels.job_id }} is slowed by {{ $labels.node }} GPU {{ $labels.gpu }}"
"""
ADMIN = secrets.token_urlsafe(24)
PASSWORD = "correct horse"


@dataclass(frozen=True)
class Stack:
    dashboard: str
    logged_in: str  # the same dashboard with basic auth (user ada)
    collector: str
    loaded: busy_cluster.Loaded


@contextlib.contextmanager
def alerting_stack(postgres: EmbeddedPostgres, users: Path) -> Iterator[Stack]:
    """The stack, its basic-auth users written to `users`."""
    require_tool("chromium")
    require_tool("chromedriver")
    dsn = new_database(postgres)
    users.write_text(f"ada:{hash_password(PASSWORD, iterations=1000)}\n")
    with running_collector(dsn, admin_token=ADMIN, rules=RULES, alert_tick_s=0.2) as collector:
        loaded = busy_cluster.load(collector)
        eventually(lambda: len(firing(collector.url)) >= 6, what="the cluster's alerts to fire")
        plain = DashboardSettings(db=dsn, listen="127.0.0.1:0", collector_url=collector.url, refresh_ms=60_000)
        guarded = DashboardSettings(**{**plain.__dict__, "basic_auth_file": Path(users)})
        with running_dashboard(plain) as url, running_dashboard(guarded) as logged_in:
            yield Stack(url, logged_in, collector.url, loaded)


def firing(collector: str) -> list[dict[str, Any]]:
    return list(httpx.get(f"{collector}/api/v1/alerts", params={"state": "firing"}, timeout=5).json())
