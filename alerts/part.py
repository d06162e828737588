"""The alerts as a collector part: the views rules query, the alerting API, and the engine as a leader task."""

from __future__ import annotations

from gpuscope.alerts import api, views
from gpuscope.alerts.engine import LOCK_KEY, AlertEngine
from gpuscope.collector.parts import Part, ShardedTask


def alerts_part(engine: AlertEngine | None) -> Part:
    """Every collector serves the alerting API over the views; those with an engine share the rule groups'
    evaluation by shard, and one of them queues and delivers (alerts/engine.py)."""
    tasks = () if engine is None else (ShardedTask("alert engine", LOCK_KEY, engine.lead_shards, engine.retry_s()),)
    return Part(name="alerts", prepare=views.apply, routers=(api.router,), leader_tasks=tasks)
