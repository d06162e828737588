"""Creates the read-only views the alert rules query (views.sql), and re-creates them when the file changes.

Applied after the migrations and the TimescaleDB layout (which replaces tables the views read). The
file's hash is kept as the schema's comment, so an unchanged file costs one query at start.
"""

from __future__ import annotations

import hashlib
from importlib import resources

import psycopg

from gpuscope.core.migrations import MIGRATION_LOCK_KEY

SCHEMA = "alerting"


def views_sql() -> str:
    return resources.files("gpuscope.alerts").joinpath("views.sql").read_text(encoding="utf-8")


def apply(dsn: str) -> bool:
    """Make schema `alerting` match views.sql; True when it was (re)created now."""
    text = views_sql()
    digest = hashlib.sha256(text.encode()).hexdigest()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        try:
            row = conn.execute(
                "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = %s", (SCHEMA,)
            ).fetchone()
            if row and row[0] == digest:
                return False
            with conn.transaction():
                conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
                conn.execute(text.encode())
                conn.execute(f"COMMENT ON SCHEMA {SCHEMA} IS '{digest}'")  # hex digest: nothing to quote
            return True
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
