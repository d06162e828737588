"""Bytes per GPU-day on TimescaleDB's columnstore, with gpuscope's own TimescaleDB layout.

TimescaleDB is not packaged for Debian; the one that runs here is the test build (PGlite: PostgreSQL 17
and TimescaleDB in WebAssembly, tests/timescale), found only in a checkout after `npm ci`. It is slow, so
a slice of the fleet is loaded (the day of the first GPUS GPUs: per GPU the same rows a chunk holds at
any fleet size, so bytes per GPU-day carry over; the per-chunk catalogue rows are shared by fewer GPUs,
which errs on the large side). Samples are compressed as the layout's policy would after two hours, the
continuous aggregates refreshed and compressed as their policies would; the size is the database's growth.
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
GPUS = 32
INSERT_ROWS = 20_000
AGGREGATES = ("gpu_rollup_1m", "gpu_rollup_1h", "gpu_energy_1m")


def unavailable() -> str | None:
    """Why the TimescaleDB figure cannot be measured here, or None when it can."""
    if shutil.which("node") is None:
        return "no node (the TimescaleDB test build runs on Node)"
    if not (PGLITE / "node_modules" / "@unni-craftsman" / "pglite" / "package.json").exists():
        return f"the TimescaleDB test build is not installed: npm ci --prefix {PGLITE}"
    return None


def bytes_per_gpu_day(telemetry: Telemetry) -> tuple[float, int]:
    """(bytes per GPU-day compressed, GPUs loaded)."""
    gpus = min(GPUS, len(telemetry.gpus))
    with _pglite() as dsn:
        migrate(dsn)
        assert timescale.setup(dsn, "auto") == "timescaledb"
        with psycopg.connect(dsn, autocommit=True) as conn:
            empty = _size(conn)
            _load(conn, telemetry, gpus)
            end = telemetry.end + telemetry.step_s
            for view in AGGREGATES:
                conn.execute(f"CALL refresh_continuous_aggregate('{view}', NULL, to_timestamp(%s))", (end,))
            # What the compression policies do once each chunk is old enough (two hours for samples, a day
            # for the minute aggregates): a stored day is compressed but for its last day.
            for table in ("gpu_sample", *AGGREGATES):
                conn.execute("SELECT compress_chunk(c) FROM show_chunks(%s) c", (table,))
            conn.execute("VACUUM")
            grown = _size(conn) - empty
    days = telemetry.steps * telemetry.step_s / 86400
    return grown / (gpus * days), gpus


def _load(conn: psycopg.Connection[Any], telemetry: Telemetry, gpus: int) -> None:
    slice_ = telemetry.gpus[:gpus]
    for node in sorted({g.node for g in slice_}):
        rack = next(g.rack for g in slice_ if g.node == node)
        conn.execute("INSERT INTO node (cluster, name, rack) VALUES ('bench', %s, %s)", (node, rack))
    for g in slice_:
        conn.execute(
            "INSERT INTO gpu (node_id, gpu_index, uuid, model, pci_bus_id)"
            " SELECT node_id, %s, %s, 'H100', '-' FROM node WHERE name = %s",
            (g.index, g.uuid, g.node),
        )
    ids = dict(conn.execute("SELECT uuid, gpu_id FROM gpu").fetchall())
    gpu_ids = np.array([ids[g.uuid] for g in slice_])
    names = ", ".join(METRICS)
    casts = ", ".join("%s::float4[]" for _ in METRICS)
    values = ", ".join(f"m{i}" for i in range(len(METRICS)))
    per_chunk = max(1, INSERT_ROWS // gpus)
    for lo in range(0, telemetry.steps, per_chunk):
        hi = min(lo + per_chunk, telemetry.steps)
        block = telemetry.block(lo, hi)
        conn.execute(
            f"INSERT INTO gpu_sample (ts, gpu_id, up, {names})"  # noqa: S608 (names are our constants)
            f" SELECT to_timestamp(t), g, true, {values} FROM unnest(%s::float8[], %s::int[], {casts})"
            f" AS r(t, g, {values})",
            [
                np.repeat(telemetry.stamps(lo, hi), gpus).tolist(),
                np.tile(gpu_ids, hi - lo).tolist(),
                *(block[key][:, :gpus].reshape(-1).tolist() for key in METRICS),
            ],
        )


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
