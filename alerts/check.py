"""`gpuscope alerts check`: a rules file, its SQL included, checked against the real schema.

Each query is planned (LIMIT 0) in a read-only transaction over schema `alerting`, on the given
database or on a private PostgreSQL started for the check, so a misspelt view or column, a missing
`value` or a non-numeric one is found before the rule is deployed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
from psycopg import sql

from gpuscope.alerts import views
from gpuscope.alerts.evaluate import NUMERIC_OIDS, query_of
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
