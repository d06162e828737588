"""The numpy binary COPY encoder against a real PostgreSQL: what goes in comes back, NULLs included."""

from __future__ import annotations

import numpy as np
import psycopg

from gpuscope.collector.store.copy_binary import CopyColumn, encode


def test_round_trip_with_nulls_in_mixed_patterns(dsn: str) -> None:
    ts = np.array([1_790_000_000.25, 1_790_000_001.5, 1_790_000_002.0, 1_790_000_003.0])
    columns = [
        CopyColumn("timestamptz", ts),
        CopyColumn("int4", np.array([1, 2, 3, 4])),
        CopyColumn("bool", np.array([True, False, True, True])),
        CopyColumn("float4", np.array([1.5, np.nan, 3.25, np.nan])),
        CopyColumn("float8", np.array([np.nan, 2.125, 1e300, 4.0])),
        CopyColumn("int8", np.array([2.0**40, 7.0, np.nan, 0.0])),
        CopyColumn("int2", np.array([1.0, 2.0, 3.0, np.nan])),
    ]
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TEMP TABLE t (ts timestamptz, i int4, b bool, r real, d float8, l int8, s int2)")
        with conn.cursor().copy("COPY t FROM STDIN (FORMAT BINARY)") as copy:
            copy.write(encode(columns))
        rows = conn.execute("SELECT extract(epoch FROM ts)::float8, i, b, r, d, l, s FROM t ORDER BY i").fetchall()
    assert rows == [
        (1_790_000_000.25, 1, True, 1.5, None, 2**40, 1),
        (1_790_000_001.5, 2, False, None, 2.125, 7, 2),
        (1_790_000_002.0, 3, True, 3.25, 1e300, None, 3),
        (1_790_000_003.0, 4, True, None, 4.0, 0, None),
    ]


def test_empty_input_is_a_valid_copy(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TEMP TABLE t (r real)")
        with conn.cursor().copy("COPY t FROM STDIN (FORMAT BINARY)") as copy:
            copy.write(encode([CopyColumn("float4", np.array([], dtype=np.float64))]))
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)
