"""Applies numbered SQL files (NNNN_name.sql) once each, in order, under one advisory lock.

The runner knows nothing of what the files hold: the store passes its own folder of migrations.
"""

from __future__ import annotations

import logging
from importlib.resources.abc import Traversable

import psycopg

log = logging.getLogger(__name__)

# Several collectors may start at once against one database: one migrates (or applies views), the others wait.
MIGRATION_LOCK_KEY = 0x67707573636F7065 & 0x7FFFFFFFFFFFFFFF  # "gpuscope"


def numbered_sql_files(folder: Traversable) -> list[tuple[int, str, str]]:
    """(version, name, sql) for every NNNN_name.sql in `folder`, in version order."""
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            found.append((version, entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)


def apply_migrations(dsn: str, folder: Traversable, up_to: int | None = None) -> list[int]:
    """Bring the schema up to date (or to version `up_to`, for upgrade tests); returns the versions applied now."""
    applied_now = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migration ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {row[0] for row in conn.execute("SELECT version FROM schema_migration")}
            for version, name, sql in numbered_sql_files(folder):
                if version in done or (up_to is not None and version > up_to):
                    continue
                with conn.transaction():
                    conn.execute(sql.encode())
                    conn.execute("INSERT INTO schema_migration (version, name) VALUES (%s, %s)", (version, name))
                log.info("applied migration %s", name)
                applied_now.append(version)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
    return applied_now
