"""`gpuscope alerts check`: a rules file, its SQL included, checked against the real schema.

Each query is planned (LIMIT 0) in a read-only transaction over schema `alerting`, on the given
database or on a private PostgreSQL started for the check, so a misspelt view or column, a missing
`value` or a non-numeric one is found before the rule is deployed.

A Prometheus rules file has the same shape with PromQL in `expr` (gpuscope ships one for Prometheus
sites, deploy/prometheus/): promql_rules() finds it first, so it is named as such rather than reported
as SQL syntax errors.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

import psycopg
import yaml
from psycopg import sql

from gpuscope.alerts import views
from gpuscope.alerts.evaluate import NUMERIC_OIDS, SINCE, TIMESTAMPTZ_OID, query_of
from gpuscope.alerts.rules import Group


def check_sql(dsn: str, groups: list[Group], timeout_s: float = 10.0) -> list[str]:
    """Problems with the rules' queries, each naming its group and rule; [] when all are fine."""
    problems = []
    with psycopg.connect(dsn) as conn:
        for group in groups:
            for rule in group.rules:
                where = f"group {group.name!r} rule {rule.alert}"
                try:
                    with conn.transaction():
                        conn.execute("SET TRANSACTION READ ONLY")
                        conn.execute(
                            sql.SQL("SET LOCAL statement_timeout = {}").format(
                                sql.Literal(f"{int(timeout_s * 1000)}ms")
                            )
                        )
                        conn.execute("SET LOCAL search_path = alerting, pg_catalog")
                        cur = conn.execute(sql.SQL("{} LIMIT 0").format(query_of(rule)))
                        columns = [(c.name, c.type_code) for c in cur.description or ()]
                except psycopg.Error as exc:
                    first = str(exc).strip().splitlines()
                    problems.append(f"{where}: {first[0] if first else type(exc).__name__}")
                    continue
                names = [name for name, _ in columns]
                if "value" not in names:
                    problems.append(f"{where}: the query returns no 'value' column (columns: {', '.join(names)})")
                elif dict(columns)["value"] not in NUMERIC_OIDS:
                    problems.append(f"{where}: 'value' must be numeric")
                if SINCE in names and dict(columns)[SINCE] != TIMESTAMPTZ_OID:
                    problems.append(f"{where}: '{SINCE}' must be a timestamptz (since when the condition holds)")
                if len(set(names)) != len(names):
                    problems.append(f"{where}: a column name appears twice: {', '.join(names)}")
    return problems


@contextlib.contextmanager
def scratch_database() -> Iterator[str]:
    """A private PostgreSQL with gpuscope's schema and the alert views, removed afterwards."""
    from gpuscope.collector.store.migrate import migrate
    from gpuscope.core.embedded_pg import throwaway_postgres

    with throwaway_postgres("gpuscope-check-", settings={"fsync": "off"}) as server:
        migrate(server.dsn)
        views.apply(server.dsn)
        yield server.dsn


# A gpuscope rule is one SELECT (or WITH ... SELECT), maybe after comments or an opening parenthesis.
_SQL_START = re.compile(r"(?:\s|--[^\n]*(?:\n|$)|/\*.*?\*/|\()*(?:select|with|values|table)\b", re.I | re.S)
# Shapes only PromQL has. Looked for only in an expr that does not start as SQL, so a misspelt SELECT
# without any of them still gets its SQL error.
_PROMQL_SHAPE = re.compile(
    r"""[A-Za-z_:][\w:]*\s*\{[^}]*\}                    # a selector: metric{label="x"}
      | \[\s*\d+(?:ms|[smhdwy])                          # a range or subquery: [5m]
      | \b(?:by|without|on|ignoring)\s*\(                # aggregation and vector matching
      | \bgroup_(?:left|right)\b
      | \b(?:rate|irate|increase|delta|idelta|deriv|changes|resets|absent|predict_linear
           |histogram_quantile|label_replace|label_join|\w+_over_time)\s*\(
      | ^\s*[A-Za-z_:][\w:]*\s*(?:==|!=|>=|<=|>|<)\s*-?\d           # a metric compared: up == 0""",
    re.X | re.S,
)


def is_promql(expr: str) -> bool:
    """Whether a rule's expr is PromQL rather than gpuscope's SQL."""
    return not _SQL_START.match(expr) and bool(_PROMQL_SHAPE.search(expr))


def promql_rules(path: Path) -> list[str]:
    """The rules (alerting or recording) of a rules file whose expr is PromQL, by name; [] for gpuscope's
    SQL rules, and for a file that cannot be read or parsed (loading it reports that)."""
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return []
    groups = doc.get("groups") if isinstance(doc, dict) else None
    found = []
    for group in groups if isinstance(groups, list) else []:
        rules = group.get("rules") if isinstance(group, dict) else None
        for rule in rules if isinstance(rules, list) else []:
            if isinstance(rule, dict) and isinstance(rule.get("expr"), str) and is_promql(rule["expr"]):
                found.append(str(rule.get("alert") or rule.get("record") or "?"))
    return found
