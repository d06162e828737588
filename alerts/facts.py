"""What the evaluating collector knows that no table holds: its database's state, and the racks' power
budgets the site set. Set as settings of the evaluation's transaction (set_config, in memory: it works on
a full disk, which a table would not) and read by the views alerting.collector_database and
alerting.rack_power."""

from __future__ import annotations

import json
from collections.abc import Mapping

from gpuscope.collector.query.rack_power import NEAR_BUDGET
from gpuscope.collector.store.availability import DatabaseStatus


def database_facts(status: DatabaseStatus) -> dict[str, str]:
    state = status.current()
    free = status.free_bytes()
    return {
        "gpuscope.database_state": state.cause.name.lower(),
        "gpuscope.database_reason": state.reason,
        "gpuscope.database_free_bytes": "" if free is None else str(free),
    }


def rack_facts(budgets_kw: Mapping[str, float]) -> dict[str, str]:
    """The racks' budgets ("cluster/rack" or "rack" -> kW, as the dashboard's --rack-budgets), and the share
    of a budget that is near it: the one threshold the overview flags racks at (NEAR_BUDGET)."""
    return {
        "gpuscope.rack_budgets_kw": json.dumps(dict(budgets_kw), sort_keys=True),
        "gpuscope.rack_near_budget": repr(NEAR_BUDGET),
    }
