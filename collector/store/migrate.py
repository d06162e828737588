"""Applies the numbered SQL files in migrations/ once each, in order, at collector start."""

from __future__ import annotations

import logging
from importlib import resources

import psycopg

log = logging.getLogger(__name__)

# Several collectors may start at once against one database: one migrates, the others wait.
MIGRATION_LOCK_KEY = 0x67707573636F7065 & 0x7FFFFFFFFFFFFFFF  # "gpuscope"


def available() -> list[tuple[int, str, str]]:
    """(version, name, sql) for every migration shipped, in version order."""
    found = []
    for entry in resources.files("collector.store").joinpath("migrations").iterdir():
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            found.append((version, entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)


def migrate(dsn: str, up_to: int | None = None) -> list[int]:
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
            for version, name, sql in available():
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
