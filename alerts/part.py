"""The alerts as a collector part: the views rules query, the alerting API, and the engine as a leader task."""

from __future__ import annotations

from gpuscope.alerts import api, views
from gpuscope.alerts.engine import LOCK_KEY, AlertEngine
from gpuscope.collector.parts import LeaderTask, Part


def alerts_part(engine: AlertEngine | None) -> Part:
    """Every collector serves the alerting API over the views; only one with an engine may evaluate."""
    tasks = () if engine is None else (LeaderTask("alert engine", LOCK_KEY, engine.lead, engine.retry_s()),)
    return Part(name="alerts", prepare=views.apply, routers=(api.router,), leader_tasks=tasks)
