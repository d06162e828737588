"""The TimescaleDB layout: chosen at start, applied once (layout.sql), and its retention pass.

With it, samples live in hypertables compressed after two hours, rollups are continuous aggregates
refreshed by TimescaleDB's own jobs, and retention drops chunks; the incremental rollup bookkeeping
and the daily partitions of the plain layout are not used. Objects keep their plain-layout names and
columns, so the query layer is the same for both.
"""

from __future__ import annotations

import logging
from datetime import datetime
from importlib import resources
from typing import Any, Literal

import psycopg
from psycopg import AsyncConnection

from gpuscope.core.migrations import MIGRATION_LOCK_KEY

log = logging.getLogger(__name__)

Mode = Literal["auto", "on", "off"]
Layout = Literal["plain", "timescaledb"]
LAYOUT_VERSION = 1_000_000  # recorded in schema_migration, apart from the numbered migrations
LAYOUT_NAME = "timescale/layout.sql"
# Later steps of the layout, each applied once, in order, to a database that has the layout (new or old).
LAYOUT_STEPS = ((1_000_001, "timescale/compress_aggregates.sql"),)
RAW_TABLES = ("gpu_sample", "ib_port_sample", "mig_sample")
MINUTE_AGGREGATES = ("gpu_rollup_1m", "gpu_energy_1m")
HOUR_AGGREGATES = ("gpu_rollup_1h",)


def layout_sql(name: str = LAYOUT_NAME) -> str:
    file = name.removeprefix("timescale/")
    return resources.files("gpuscope.collector.store.timescale").joinpath(file).read_text(encoding="utf-8")


def setup(dsn: str, mode: Mode) -> Layout:
    """After migrate(): apply the TimescaleDB layout if `mode` asks for it and the server has the
    extension ("auto": when available); returns the layout the database now has."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        try:
            applied = conn.execute("SELECT 1 FROM schema_migration WHERE version = %s", (LAYOUT_VERSION,)).fetchone()
            if applied:
                if mode == "off":
                    raise RuntimeError(
                        "this database already uses the TimescaleDB layout; --timescaledb off cannot undo it"
                    )
                _apply_steps(conn)
                return "timescaledb"
            available = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'timescaledb'").fetchone()
            if mode == "off" or (mode == "auto" and not available):
                return "plain"
            if not available:
                raise RuntimeError(
                    "--timescaledb on, but this PostgreSQL server has no timescaledb extension"
                    " (use a TimescaleDB image, or --timescaledb auto to fall back to plain PostgreSQL)"
                )
            with conn.transaction():
                conn.execute(layout_sql().encode())
                conn.execute(
                    "INSERT INTO schema_migration (version, name) VALUES (%s, %s)", (LAYOUT_VERSION, LAYOUT_NAME)
                )
            _apply_steps(conn)
            log.info("applied the TimescaleDB layout (hypertables, compression, continuous aggregates)")
            return "timescaledb"
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))


def _apply_steps(conn: psycopg.Connection[Any]) -> None:
    """The layout's later steps not yet applied (a database given the layout by an older collector)."""
    recorded = conn.execute("SELECT version FROM schema_migration WHERE version > %s", (LAYOUT_VERSION,))
    done = {row[0] for row in recorded}
    for version, name in LAYOUT_STEPS:
        if version not in done:
            with conn.transaction():
                conn.execute(layout_sql(name).encode())
                conn.execute("INSERT INTO schema_migration (version, name) VALUES (%s, %s)", (version, name))
            log.info("applied TimescaleDB layout step %s", name)


async def drop_old(conn: AsyncConnection[Any], cutoffs: dict[str, datetime]) -> None:
    """drop_chunks for raw samples ('raw'), minute and hour aggregates ('minute', 'hour')."""
    tiers = [(t, "raw") for t in RAW_TABLES] + [(t, "minute") for t in MINUTE_AGGREGATES]
    tiers += [(t, "hour") for t in HOUR_AGGREGATES]
    for table, tier in tiers:
        cur = await conn.execute("SELECT count(*) FROM drop_chunks(%s, older_than => %s)", (table, cutoffs[tier]))
        row = await cur.fetchone()
        if row and row[0]:
            log.info("retention: dropped %d chunks of %s", row[0], table)
