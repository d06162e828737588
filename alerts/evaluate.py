"""Runs a group's rule queries in one read-only transaction and turns their rows into alert samples.

Every query sees the views of schema `alerting` (search_path), runs under a statement timeout and
inside its own savepoint: a broken or slow rule is reported and the others still run.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import AsyncConnection, sql

from gpuscope.alerts.rules import Group, Rule
from gpuscope.core.timefmt import rfc3339

NUMERIC_OIDS = {20, 21, 23, 700, 701, 1700}  # int8, int2, int4, float4, float8, numeric
TIMESTAMPTZ_OID = 1184
# Columns that are not labels: the alert's value, and since when its condition has held as the stored
# telemetry shows (optional): the `for` clock starts there, not when the engine first saw the row.
SINCE = "since"
RESERVED = ("value", SINCE)


@dataclass(frozen=True)
class Sample:
    """One row of a rule's result: an alert instance's labels (alertname included) and value, and since
    when its condition has held as the data tells (the query's `since` column; None: it cannot tell)."""

    fingerprint: str
    labels: dict[str, str]
    annotations: dict[str, str]
    value: float | None
    since: dt.datetime | None = None


@dataclass(frozen=True)
class RuleResult:
    rule: Rule
    samples: tuple[Sample, ...]
    error: str | None  # the rule failed this time: its alerts keep their state
    seconds: float


# Views that cost one index probe per GPU or port. When several rules of a group read one, it is
# computed once per evaluation into a temporary table of the same name, which the rules then read
# instead (the temporary schema comes first in the search path); the table goes with the transaction.
SHARED_VIEWS = ("gpu_latest", "nic_latest")


def shared_views(group: Group) -> list[str]:
    return [
        view
        for view in SHARED_VIEWS
        if sum(re.search(rf"\b{view}\b", rule.expr) is not None for rule in group.rules) >= 2
    ]


async def evaluate_group(
    conn: AsyncConnection[Any], group: Group, timeout_s: float, facts: Mapping[str, str] | None = None
) -> list[RuleResult]:
    """`facts`: settings for this evaluation's transaction (alerts/facts.py), read by the views."""
    results = []
    async with conn.transaction():
        if facts:
            await conn.execute(
                "SELECT set_config(name, value, true) FROM unnest(%s::text[], %s::text[]) AS f (name, value)",
                (list(facts), list(facts.values())),
            )
        await conn.execute(
            sql.SQL("SET LOCAL statement_timeout = {}").format(sql.Literal(f"{int(timeout_s * 1000)}ms"))
        )
        await conn.execute("SET LOCAL search_path = alerting, pg_catalog")
        for view in shared_views(group):
            await conn.execute(
                sql.SQL("CREATE TEMPORARY TABLE {} ON COMMIT DROP AS SELECT * FROM alerting.{}").format(
                    sql.Identifier(view), sql.Identifier(view)
                )
            )
        await conn.execute("SET LOCAL transaction_read_only = on")  # the rules themselves write nothing
        for rule in group.rules:
            started = time.perf_counter()
            try:
                async with conn.transaction():  # a savepoint: a failing rule does not end the others'
                    cur = await conn.execute(query_of(rule))
                    rows = await cur.fetchall()
                    names = [c.name for c in cur.description or ()]
                samples = tuple(to_samples(rule, names, rows))
                results.append(RuleResult(rule, samples, None, time.perf_counter() - started))
            except (psycopg.Error, ValueError) as exc:
                results.append(RuleResult(rule, (), _reason(exc), time.perf_counter() - started))
    return results


def query_of(rule: Rule) -> sql.Composed:
    """The rule's SQL as a subquery: exactly one SELECT (or WITH ... SELECT), nothing after it."""
    return sql.SQL("SELECT * FROM ({}\n) AS rule_result").format(sql.SQL(rule.expr))


def to_samples(rule: Rule, names: list[str], rows: list[tuple[Any, ...]]) -> list[Sample]:
    if "value" not in names:
        raise ValueError("the query returns no 'value' column")
    if len(set(names)) != len(names):
        raise ValueError(f"the query returns a column name twice: {names}")
    value_at = names.index("value")
    since_at = names.index(SINCE) if SINCE in names else None
    out, seen = [], set()
    for row in rows:
        labels = {"alertname": rule.alert}
        for name, cell in zip(names, row, strict=True):
            if name not in RESERVED and cell is not None:
                labels[name] = label_text(cell)
        value = _number(row[value_at])
        since = None if since_at is None else _timestamp(row[since_at])
        for name, template in rule.labels.items():
            labels[name] = template.render(labels, value)  # the rule's labels win, as in Prometheus
        fp = fingerprint(labels)
        if fp in seen:
            raise ValueError(f"two rows with the same labels {labels}: add a column that tells them apart")
        seen.add(fp)
        annotations = {name: t.render(labels, value) for name, t in rule.annotations.items()}
        out.append(Sample(fp, labels, annotations, value, since))
    return out


def fingerprint(labels: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(sorted(labels.items())).encode()).hexdigest()[:16]


def label_text(cell: Any) -> str:
    if isinstance(cell, bool):
        return "true" if cell else "false"
    if isinstance(cell, float):
        return str(int(cell)) if cell.is_integer() else repr(cell)
    if isinstance(cell, dt.datetime):
        return rfc3339(cell)
    if isinstance(cell, dict | list):
        return json.dumps(cell, sort_keys=True)
    return str(cell)


def _number(cell: Any) -> float | None:
    if cell is None:
        return None
    if isinstance(cell, bool):
        return float(cell)
    if isinstance(cell, int | float | Decimal):
        value = float(cell)
        return value if not math.isnan(value) else None
    raise ValueError(f"'value' must be a number, got {type(cell).__name__} {cell!r}")


def _timestamp(cell: Any) -> dt.datetime | None:
    if cell is None:
        return None
    if isinstance(cell, dt.datetime) and cell.tzinfo is not None:
        return cell
    raise ValueError(f"'{SINCE}' must be a timestamptz, got {type(cell).__name__} {cell!r}")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, psycopg.errors.QueryCanceled):
        return "statement timeout: the query took too long"
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
