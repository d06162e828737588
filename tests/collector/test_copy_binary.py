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


def test_rows_without_nulls_take_one_layout_and_come_back_in_order(dsn: str) -> None:
    """The common case (every row reports every column) is written as one block: values, order and the
    integer extremes survive it."""
    rng = np.random.default_rng(5)
    n = 1000
    ts = 1_790_000_000 + np.arange(n) * 0.5
    big = rng.integers(-(2**62), 2**62, n)
    big[:2] = [2**63 - 1, -(2**63) + 1]
    real = rng.random(n).astype(np.float32).astype(np.float64)  # exact in float4
    columns = [
        CopyColumn("timestamptz", ts),
        CopyColumn("int4", np.arange(n)),
        CopyColumn("int8", big),
        CopyColumn("float4", real),
    ]
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TEMP TABLE t (ts timestamptz, i int4, l int8, r real)")
        with conn.cursor().copy("COPY t FROM STDIN (FORMAT BINARY)") as copy:
            copy.write(encode(columns))
        rows = conn.execute("SELECT extract(epoch FROM ts)::float8, i, l, r FROM t ORDER BY i").fetchall()
    assert [r[0] for r in rows] == ts.tolist()
    assert [r[2] for r in rows] == big.tolist()
    assert np.array([r[3] for r in rows], dtype=np.float32).tolist() == real.astype(np.float32).tolist()
