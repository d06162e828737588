"""The TimescaleDB side of the bytes bench (gpuscope/bench/peers_timescale.py): the fleet loaded in time
order with the policies' work done at each hour, so that the in-memory test build holds only a few hours
of rows, and the values read back exactly as the driver gave them (no lossy step)."""

from __future__ import annotations

import numpy as np
import psycopg

from gpuscope.bench import peers_timescale
from gpuscope.bench.telemetry import make_telemetry
from gpuscope.collector.store import timescale
from gpuscope.collector.store.migrate import migrate

HOUR0 = 1_799_996_400  # a whole hour: the telemetry's four hours are four chunks
GPUS = 16


def test_chunks_two_hours_old_are_compressed_while_loading_and_values_stay_exact(timescale_dsn: str) -> None:
    telemetry = make_telemetry(gpus=GPUS, hours=4, end=HOUR0 + 4 * 3600 - 10)
    assert telemetry.start == HOUR0
    migrate(timescale_dsn)
    assert timescale.setup(timescale_dsn, "auto") == "timescaledb"
    with psycopg.connect(timescale_dsn, autocommit=True) as conn:
        peers_timescale._load(conn, telemetry)
        chunks = conn.execute(
            "SELECT is_compressed, count(*) FROM timescaledb_information.chunks"
            " WHERE hypertable_name = 'gpu_sample' GROUP BY 1 ORDER BY 1"
        ).fetchall()
        materialized = _materialized_rows(conn, "gpu_rollup_1m")
        stored = conn.execute("SELECT power_w, sm_active_pct, util_pct FROM gpu_sample ORDER BY ts, gpu_id").fetchall()
    # By the end of hour 4 the policy (compress after two hours) has compressed hours 0 and 1.
    assert chunks == [(False, 2), (True, 2)]
    assert materialized == GPUS * 4 * 60, "every minute refreshed as its policy would"
    block = telemetry.block(0, telemetry.steps)
    for i, key in enumerate(("power_w", "sm_active_pct", "util_pct")):
        expected = block[key].astype(np.float32).reshape(-1)  # the store's real column, in (ts, gpu) order
        got = np.array([row[i] for row in stored], dtype=np.float32)
        np.testing.assert_array_equal(got, expected, err_msg=key)


def _materialized_rows(conn: psycopg.Connection, view: str) -> int:
    """Rows in the aggregate's own hypertable: what was refreshed, not what real-time aggregation adds."""
    row = conn.execute(
        "SELECT format('%%I.%%I', h.schema_name, h.table_name) FROM _timescaledb_catalog.continuous_agg a"
        " JOIN _timescaledb_catalog.hypertable h ON h.id = a.mat_hypertable_id WHERE a.user_view_name = %s",
        (view,),
    ).fetchone()
    assert row is not None
    count = conn.execute(f"SELECT count(*) FROM {row[0]}").fetchone()  # noqa: S608 (a catalogue name)
    assert count is not None
    return int(count[0])
