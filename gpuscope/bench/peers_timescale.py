"""Bytes per GPU-day on TimescaleDB's columnstore, with gpuscope's own TimescaleDB layout.

TimescaleDB is not packaged for Debian; the one that runs here is the test build (PGlite: PostgreSQL 17
and TimescaleDB in WebAssembly, tests/timescale), found only in a checkout after `npm ci`. The whole
fleet is loaded in time order, and the database is kept as its policies would keep it on a server
(PGlite runs no background jobs): at each hour boundary the minute and hour aggregates are refreshed
and the sample chunks two hours old compressed. That bounds what the in-memory build holds to a few
hours of rows, so the full 1,024-GPU day fits. At the end every chunk is compressed (the day's last
hours as their policy will soon do) and the size is the database's growth.

A slice of the fleet would overstate the figure: each one-hour chunk carries fixed costs (its catalogue
rows, the empty row-store chunk's indexes, the compressed chunk's heap, index, TOAST table and their
free-space maps, ~100 KB a chunk), which 32 GPUs share 32 times less than 1,024 do; at 32 GPUs they
were more than half the bytes.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from gpuscope.bench.telemetry import METRICS, Telemetry
from gpuscope.collector.store import timescale
from gpuscope.collector.store.migrate import migrate

PGLITE = Path(__file__).resolve().parents[2] / "tests" / "timescale"
INSERT_ROWS = 40_000  # rows per INSERT: large enough to amortise a round trip, small enough for its arrays
CHUNK_S = 3600  # the layout's sample chunk (layout.sql: one hour)
COMPRESS_AFTER_S = 2 * 3600  # the layout's compression policy on samples
MINUTE_AGGREGATES = ("gpu_rollup_1m", "gpu_energy_1m")
HOUR_AGGREGATES = ("gpu_rollup_1h",)  # built on gpu_rollup_1m: refreshed after it
AGGREGATES = MINUTE_AGGREGATES + HOUR_AGGREGATES


def unavailable() -> str | None:
    """Why the TimescaleDB figure cannot be measured here, or None when it can."""
    if shutil.which("node") is None:
        return "no node (the TimescaleDB test build runs on Node)"
    if not (PGLITE / "node_modules" / "@unni-craftsman" / "pglite" / "package.json").exists():
        return f"the TimescaleDB test build is not installed: npm ci --prefix {PGLITE}"
    return None


def bytes_per_gpu_day(telemetry: Telemetry) -> tuple[float, int]:
    """(bytes per GPU-day compressed, GPUs loaded: the whole fleet)."""
    gpus = len(telemetry.gpus)
    with _pglite() as dsn:
        migrate(dsn)
        assert timescale.setup(dsn, "auto") == "timescaledb"
        with psycopg.connect(dsn, autocommit=True) as conn:
            empty = _size(conn)
            _load(conn, telemetry)
            end = telemetry.end + telemetry.step_s
            _refresh(conn, end)
            # The day's last chunks too, as their policies will (two hours on for samples, a day for
            # the aggregates): the figure is the day compressed.
            for table in ("gpu_sample", *AGGREGATES):
                conn.execute("SELECT compress_chunk(c, if_not_compressed => true) FROM show_chunks(%s) c", (table,))
            conn.execute("VACUUM")
            grown = _size(conn) - empty
    days = telemetry.steps * telemetry.step_s / 86400
    return grown / (gpus * days), gpus


def _load(conn: psycopg.Connection[Any], telemetry: Telemetry) -> None:
    """Every sample, in time order, with what the policies do at each hour boundary passed."""
    gpu_ids = _inventory(conn, telemetry)
    gpus = len(gpu_ids)
    names = ", ".join(METRICS)
    casts = ", ".join("%b::float4[]" for _ in METRICS)
    values = ", ".join(f"m{i}" for i in range(len(METRICS)))
    insert = (
        f"INSERT INTO gpu_sample (ts, gpu_id, up, {names})"  # noqa: S608 (names are our constants)
        f" SELECT to_timestamp(t), g, true, {values} FROM unnest(%b::float8[], %b::int[], {casts})"
        f" AS r(t, g, {values})"
    )
    per_insert = max(1, INSERT_ROWS // gpus)
    loaded_to = telemetry.start  # every sample before this time is in
    for lo in range(0, telemetry.steps, per_insert):
        hi = min(lo + per_insert, telemetry.steps)
        block = telemetry.block(lo, hi)
        conn.execute(
            insert,
            [
                np.repeat(telemetry.stamps(lo, hi), gpus).tolist(),
                np.tile(gpu_ids, hi - lo).tolist(),
                *(block[key].reshape(-1).tolist() for key in METRICS),
            ],
        )
        now = telemetry.start + hi * telemetry.step_s
        if now // CHUNK_S > loaded_to // CHUNK_S:
            _maintain(conn, now // CHUNK_S * CHUNK_S)
        loaded_to = now


def _maintain(conn: psycopg.Connection[Any], hour: float) -> None:
    """What the refresh and compression policies have done by `hour` (all samples before it are in)."""
    _refresh(conn, hour)
    conn.execute(
        "SELECT compress_chunk(c, if_not_compressed => true)"
        " FROM show_chunks('gpu_sample', older_than => to_timestamp(%s)) c",
        (hour - COMPRESS_AFTER_S,),
    )


def _refresh(conn: psycopg.Connection[Any], until: float) -> None:
    # From NULL: only what is past the last refresh (or invalidated) is materialised again.
    for view in AGGREGATES:
        conn.execute(f"CALL refresh_continuous_aggregate('{view}', NULL, to_timestamp(%s))", (until,))


def _inventory(conn: psycopg.Connection[Any], telemetry: Telemetry) -> np.ndarray:
    """Nodes and GPUs; each GPU's gpu_id, by position."""
    # One statement each: executemany's pipeline stalls behind the test build's one-session proxy.
    nodes = dict.fromkeys((g.node, g.rack) for g in telemetry.gpus)
    conn.execute(
        "INSERT INTO node (cluster, name, rack) SELECT 'bench', n, r FROM unnest(%s::text[], %s::text[]) AS u(n, r)",
        [[n for n, _ in nodes], [r for _, r in nodes]],
    )
    conn.execute(
        "INSERT INTO gpu (node_id, gpu_index, uuid, model, pci_bus_id)"
        " SELECT node_id, i, u, 'H100', '-' FROM unnest(%s::text[], %s::int[], %s::text[]) AS g(n, i, u)"
        " JOIN node ON node.name = g.n",
        [[g.node for g in telemetry.gpus], [g.index for g in telemetry.gpus], [g.uuid for g in telemetry.gpus]],
    )
    ids = dict(conn.execute("SELECT uuid, gpu_id FROM gpu").fetchall())
    return np.array([ids[g.uuid] for g in telemetry.gpus], dtype=np.int64)


def _size(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    assert row is not None
    return int(row[0])


@contextmanager
def _pglite() -> Iterator[str]:
    node = shutil.which("node")
    assert node is not None
    server = subprocess.Popen(
        [node, str(PGLITE / "server.mjs")], cwd=PGLITE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # "PORT <n>" once listening
        if not line.startswith("PORT "):
            raise RuntimeError(f"the TimescaleDB test build did not start: {line!r}")
        port = int(line.split()[1])
        yield f"host=127.0.0.1 port={port} user=postgres password=pglite dbname=postgres sslmode=disable"
    finally:
        server.terminate()
        server.wait(10)
