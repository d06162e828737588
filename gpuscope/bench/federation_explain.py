"""What the coordinator sends to the cluster databases for each question: the statements the query layer
runs, recorded as it runs them, then EXPLAIN VERBOSE'd, and their plans read for what postgres_fdw pushed
down (aggregates, joins, sorts and limits in the Remote SQL) and whether the partitions were scanned
asynchronously (all at once)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from psycopg import Connection, sql

REMOTE_SQL = re.compile(r"Remote SQL: (.*)")
LOCAL_AGGREGATE = re.compile(r"(->\s+)?(Partial |Finalize )?(Hash|Group|Mixed)?Aggregate\b")


@dataclass
class Recording:
    """A connection that notes every statement before running it (the query layer takes it as its own)."""

    conn: Connection[Any]
    statements: list[tuple[Any, Any]] = field(default_factory=list)

    def execute(self, statement: Any, params: Any = None, **kwargs: Any) -> Any:
        self.statements.append((statement, params))
        return self.conn.execute(statement, params, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


@dataclass(frozen=True)
class Pushdown:
    statements: int
    foreign_scans: int  # remote queries in the plans (a partition's scan, or a join or aggregate pushed whole)
    async_scans: int  # of those, run asynchronously
    aggregates_pushed: int  # remote queries that aggregate (GROUP BY, or an aggregate function)
    joins_pushed: int  # remote queries that join
    limits_pushed: int
    local_aggregates: int  # aggregation left on the coordinator
    plans: list[str]

    def figures(self) -> dict[str, int]:
        return {
            "statements": self.statements,
            "foreign_scans": self.foreign_scans,
            "async_scans": self.async_scans,
            "aggregates_pushed": self.aggregates_pushed,
            "joins_pushed": self.joins_pushed,
            "limits_pushed": self.limits_pushed,
            "local_aggregates": self.local_aggregates,
        }


def explain(conn: Connection[Any], ask: Callable[[Connection[Any]], Any]) -> Pushdown:
    """Run `ask` on a recording connection, then EXPLAIN VERBOSE each statement it ran."""
    recording = Recording(conn)
    ask(cast(Connection[Any], recording))
    plans = []
    for statement, params in recording.statements:
        body = sql.SQL(statement) if isinstance(statement, str) else statement
        rows = conn.execute(sql.SQL("EXPLAIN (VERBOSE, COSTS OFF) {}").format(body), params).fetchall()
        plans.append("\n".join(row[0] for row in rows))
    return _read(plans)


def _read(plans: list[str]) -> Pushdown:
    remote = [m.group(1) for plan in plans for m in REMOTE_SQL.finditer(plan)]
    aggregated = [r for r in remote if " GROUP BY " in r or re.search(r"\b(avg|sum|count|min|max)\(", r)]
    lines = [line.strip() for plan in plans for line in plan.splitlines()]
    return Pushdown(
        statements=len(plans),
        foreign_scans=len(remote),
        async_scans=sum(line.startswith(("->  Async Foreign Scan", "Async Foreign Scan")) for line in lines),
        aggregates_pushed=len(aggregated),
        joins_pushed=sum(" JOIN " in r for r in remote),
        limits_pushed=sum(" LIMIT " in r for r in remote),
        local_aggregates=sum(bool(LOCAL_AGGREGATE.match(line)) for line in lines),
        plans=plans,
    )
