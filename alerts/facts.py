"""What the evaluating collector knows that no table holds: its database's state. Set as settings of the
evaluation's transaction (set_config, in memory: it works on a full disk, which a table would not) and
read by the view alerting.collector_database."""

from __future__ import annotations

from gpuscope.collector.store.availability import DatabaseStatus


def database_facts(status: DatabaseStatus) -> dict[str, str]:
    state = status.current()
    free = status.free_bytes()
    return {
        "gpuscope.database_state": state.cause.name.lower(),
        "gpuscope.database_reason": state.reason,
        "gpuscope.database_free_bytes": "" if free is None else str(free),
    }
