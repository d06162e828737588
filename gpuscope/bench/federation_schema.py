"""The coordinator of `bench federation`: gpuscope's tables declared once more, as partitioned tables
whose partitions are postgres_fdw foreign tables, one per cluster database.

Partition keys are the ids every table already carries, so no schema or ingest change is needed:
each cluster database allocates its node, GPU and port ids from a block of its own (ID_BLOCK ids from
k * ID_BLOCK, by restarting the identity columns), and the coordinator partitions by RANGE on gpu_id
(samples, rollups, allocations, gpu), node_id (node) and port_id (ports, port samples). Rack power
carries no id: LIST on its cluster column. The dirty-minute markers carry no key at all: they are plain
parents with the foreign tables as inheritance children (the min() the readers take is then over all).

All DDL goes through psycopg.sql: names as Identifier, option values and bounds as Literal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg import sql

# Ids per cluster database: cluster k owns [k * ID_BLOCK, (k + 1) * ID_BLOCK). The read layer maps GPU
# ids to rows through an array as long as the largest id (query/heatmap.py _place), so the block stays
# modest: a million ids is room for a cluster's GPUs and their replacements many times over.
ID_BLOCK = 1_000_000
IDENTITIES = (("node", "node_id"), ("gpu", "gpu_id"), ("ib_port", "port_id"))
RANGE_KEYS = {
    "node": "node_id",
    "gpu": "gpu_id",
    "ib_port": "port_id",
    "gpu_sample": "gpu_id",
    "ib_port_sample": "port_id",
    "gpu_rollup_1m": "gpu_id",
    "gpu_rollup_1h": "gpu_id",
    "job_allocation": "gpu_id",
}
LIST_KEYS = {"rack_power_1m": "cluster", "rack_power_10m": "cluster"}
INHERITED = ("rollup_dirty_minute", "rollup_dirty_hour")
TABLES = (*RANGE_KEYS, *LIST_KEYS, *INHERITED)
# The planner settings that let aggregates and joins go to each partition's server (off by default).
COORDINATOR_SETTINGS = {"enable_partitionwise_aggregate": "on", "enable_partitionwise_join": "on"}
# Rows per round trip of a remote scan: postgres_fdw's default. 10,000 made the hottest-GPUs question
# 3.5x slower (its per-GPU scans fetch a batch to keep one row) and the heatmap no faster.
FETCH_SIZE = 100
BATCH_SIZE = 1_000  # rows per remote INSERT through the coordinator (postgres_fdw's default is 1)
CONNECT_TIMEOUT_S = 3  # a cluster database that is down fails the query in this long, not a hang


@dataclass(frozen=True)
class ClusterDb:
    index: int
    dsn: str
    clusters: tuple[str, ...]  # the cluster names whose nodes this database holds

    @property
    def server(self) -> str:
        return f"cluster_{self.index}"

    @property
    def ids(self) -> tuple[int, int]:
        return self.index * ID_BLOCK, (self.index + 1) * ID_BLOCK


def allocate_ids(db: ClusterDb) -> None:
    """Start the database's identities at its block, before any row is written (migrated, empty)."""
    first = max(1, db.ids[0])
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        for table, column in IDENTITIES:
            conn.execute(
                sql.SQL("ALTER TABLE {} ALTER COLUMN {} RESTART WITH {}").format(
                    sql.Identifier(table), sql.Identifier(column), sql.Literal(first)
                )
            )


def build_coordinator(dsn: str, dbs: Sequence[ClusterDb], remote_estimate: bool = False) -> None:
    """postgres_fdw, a server and user mapping per cluster database, its tables imported into a schema
    named after the server, then attached under partitioned (or inheriting) parents in public."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS postgres_fdw")
        for db in dbs:
            _server(conn, db, remote_estimate)
        first = sql.Identifier(dbs[0].server)
        for table in TABLES:
            like = sql.SQL("CREATE TABLE {} (LIKE {}.{})").format(sql.Identifier(table), first, sql.Identifier(table))
            if table in RANGE_KEYS:
                like += sql.SQL(" PARTITION BY RANGE ({})").format(sql.Identifier(RANGE_KEYS[table]))
            elif table in LIST_KEYS:
                like += sql.SQL(" PARTITION BY LIST ({})").format(sql.Identifier(LIST_KEYS[table]))
            conn.execute(like)
            for db in dbs:
                conn.execute(_attach(table, db))
        database = conn.execute("SELECT current_database()").fetchone()
        assert database is not None
        for name, value in COORDINATOR_SETTINGS.items():
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                    sql.Identifier(database[0]), sql.Identifier(name), sql.Literal(value)
                )
            )


def analyze(dsn: str) -> None:
    """Statistics of the foreign tables, which autovacuum never gathers (it samples every remote table)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE")


def set_remote_estimate(dsn: str, dbs: Sequence[ClusterDb], on: bool) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for db in dbs:
            conn.execute(
                sql.SQL("ALTER SERVER {} OPTIONS (SET use_remote_estimate {})").format(
                    sql.Identifier(db.server), sql.Literal(str(on).lower())
                )
            )


def _server(conn: psycopg.Connection[Any], db: ClusterDb, remote_estimate: bool) -> None:
    address = urlsplit(db.dsn)
    options = {
        "host": address.hostname or "127.0.0.1",
        "port": str(address.port or 5432),
        "dbname": address.path.lstrip("/"),
        "async_capable": "true",  # the partitions' scans run at once, not one after another
        "fetch_size": str(FETCH_SIZE),
        "batch_size": str(BATCH_SIZE),
        "use_remote_estimate": str(remote_estimate).lower(),
        "connect_timeout": str(CONNECT_TIMEOUT_S),
    }
    server = sql.Identifier(db.server)
    conn.execute(
        sql.SQL("CREATE SERVER {} FOREIGN DATA WRAPPER postgres_fdw OPTIONS ({})").format(server, _options(options))
    )
    login = {"user": address.username or "", "password": address.password or ""}
    conn.execute(sql.SQL("CREATE USER MAPPING FOR CURRENT_USER SERVER {} OPTIONS ({})").format(server, _options(login)))
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(server))
    conn.execute(
        sql.SQL("IMPORT FOREIGN SCHEMA public LIMIT TO ({}) FROM SERVER {} INTO {}").format(
            sql.SQL(", ").join(sql.Identifier(t) for t in TABLES), server, server
        )
    )


def _attach(table: str, db: ClusterDb) -> sql.Composed:
    child = sql.SQL("{}.{}").format(sql.Identifier(db.server), sql.Identifier(table))
    if table in RANGE_KEYS:
        lo, hi = db.ids
        return sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES FROM ({}) TO ({})").format(
            sql.Identifier(table), child, sql.Literal(lo), sql.Literal(hi)
        )
    if table in LIST_KEYS:
        return sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES IN ({})").format(
            sql.Identifier(table), child, sql.SQL(", ").join(sql.Literal(c) for c in db.clusters)
        )
    return sql.SQL("ALTER FOREIGN TABLE {} INHERIT {}").format(child, sql.Identifier(table))


def _options(values: dict[str, str]) -> sql.Composed:
    return sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(k), sql.Literal(v)) for k, v in values.items())
