"""From firing alerts to queued notifications: the groups' bookkeeping and the silences are read,
decide.py decides (routing, grouping, timers, silences, inhibition), and the groups' new bookkeeping
and the outbox rows are written, all in one transaction (store.py): a restart neither loses nor
repeats a notification.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from psycopg import AsyncConnection

from gpuscope.alerts import store
from gpuscope.alerts.config import NotifyConfig
from gpuscope.alerts.decide import decide
from gpuscope.alerts.state import Instance


async def dispatch(
    conn: AsyncConnection[Any], instances: dict[str, Instance], config: NotifyConfig, now: dt.datetime
) -> int:
    """Queue the notifications due now; returns how many."""
    async with conn.transaction():
        rows = await store.lock_groups(conn)
        silences = await store.active_silences(conn)
        decision = decide(instances, config, rows, silences, now)
        await store.write_decision(conn, decision, now)
    return len(decision.notifications)
