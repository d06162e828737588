"""The Reports page's reads, each in one connection: GPU usage over a range by one dimension
(collector/query/usage.py) and what stragglers cost over it (stragglers/cost.py)."""

from __future__ import annotations

from typing import Any

from psycopg_pool import ConnectionPool

from gpuscope.collector.query.timerange import TimeRange
from gpuscope.collector.query.usage import Dimension, Rates, UsageReport, usage_report
from gpuscope.stragglers.cost import CostReport, straggler_cost


def load_usage(pool: ConnectionPool[Any], window: TimeRange, by: Dimension, rates: Rates) -> UsageReport:
    with pool.connection() as conn:
        return usage_report(conn, window, by, rates)


def load_straggler_cost(pool: ConnectionPool[Any], window: TimeRange) -> tuple[CostReport, CostReport]:
    """By job and by cause."""
    with pool.connection() as conn:
        return straggler_cost(conn, window, "job"), straggler_cost(conn, window, "cause")
