"""The sample columns the database stores, with the range a valid value must fall in.

Keys match the exporter's metric catalog and the ingest format (docs/ingest-format.md); the
collector keeps its own list because the two sides share only the wire format.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

INT64_MAX = 2**63 - 1  # an int, not a float: float(2**63 - 1) is 2^63, one past the bound
# "Not reported" in an integer column (a value no column allows: every integer column's low is >= 0).
NULL_INT = -(2**63)


@dataclass(frozen=True)
class Column:
    key: str
    pg_type: str  # as given to psycopg's binary COPY set_types
    low: float | int  # exact: ints for integer columns
    high: float | int
    counter: bool = False  # only increases (until a reset): charts show its rate

    def __post_init__(self) -> None:
        if self.integer and not (type(self.low) is int and type(self.high) is int and self.low > NULL_INT):
            raise ValueError(f"{self.key}: an integer column's bounds are ints above {NULL_INT}")

    @property
    def integer(self) -> bool:
        return self.pg_type in ("int2", "int4", "int8")

    @property
    def float_bounds(self) -> tuple[float, float]:
        """The bounds as doubles a double must fall within: the exact bounds rounded inwards (for
        int8, float(2^63-1) would be 2^63, which no int8 holds; the largest double below is 2^63-1024)."""
        low, high = float(self.low), float(self.high)
        if low < self.low:
            low = float(np.nextafter(low, np.inf))
        if high > self.high:
            high = float(np.nextafter(high, -np.inf))
        return low, high


def _counter(key: str) -> Column:
    return Column(key, "int8", 0, INT64_MAX, counter=True)


GPU_COLUMNS: tuple[Column, ...] = (
    Column("util_pct", "float4", 0, 100),
    Column("mem_copy_util_pct", "float4", 0, 100),
    Column("sm_active_pct", "float4", 0, 100),
    Column("tensor_active_pct", "float4", 0, 100),
    Column("fb_used_bytes", "int8", 0, 2**50),
    Column("fb_total_bytes", "int8", 0, 2**50),
    Column("temp_c", "float4", -40, 200),
    Column("mem_temp_c", "float4", -40, 200),
    Column("power_w", "float4", 0, 10_000),
    Column("power_limit_w", "float4", 0, 10_000),
    Column("energy_j", "float8", 0, 1e18, counter=True),
    Column("sm_clock_mhz", "float4", 0, 10_000),
    Column("mem_clock_mhz", "float4", 0, 20_000),
    Column("clock_event_reasons", "int8", 0, INT64_MAX),
    _counter("pcie_replay"),
    _counter("ecc_corrected"),
    _counter("ecc_uncorrected"),
    Column("pcie_tx_bytes_per_s", "float4", 0, 1e12),
    Column("pcie_rx_bytes_per_s", "float4", 0, 1e12),
    Column("throttle_power_s", "float8", 0, 1e12, counter=True),
    Column("throttle_thermal_s", "float8", 0, 1e12, counter=True),
    _counter("remapped_rows_correctable"),
    _counter("remapped_rows_uncorrectable"),
    Column("remap_pending", "int2", 0, 1),
    Column("remap_failure", "int2", 0, 1),
    Column("recovery_action", "int2", 0, 255),  # NVML_GPU_RECOVERY_ACTION_*: 0-7 today, room for later ones
    _counter("nvlink_tx_bytes"),
    _counter("nvlink_rx_bytes"),
    _counter("nvlink_crc_errors"),
    _counter("nvlink_replay_errors"),
    _counter("nvlink_recovery_errors"),
)

PORT_COLUMNS: tuple[Column, ...] = (
    _counter("xmit_bytes"),
    _counter("rcv_bytes"),
    _counter("xmit_packets"),
    _counter("rcv_packets"),
    _counter("xmit_wait"),
    _counter("symbol_errors"),
    _counter("link_downed"),
    _counter("rcv_errors"),
    Column("state", "int2", 0, 5),
    Column("rate_gbps", "float4", 0, 100_000),
    _counter("link_error_recovery"),
    _counter("xmit_discards"),
    Column("phys_state", "int2", 0, 7),
)

# Per MIG device: its GPU instance's memory and activity, with the GPU columns' units and ranges.
MIG_COLUMNS: tuple[Column, ...] = tuple(
    c for c in GPU_COLUMNS if c.key in ("fb_used_bytes", "fb_total_bytes", "sm_active_pct", "tensor_active_pct")
)

# Metrics a heatmap or chart may show: a whitelist, since the name becomes an SQL identifier.
GPU_METRIC_KEYS = frozenset(c.key for c in GPU_COLUMNS)
PORT_METRICS = {c.key: c for c in PORT_COLUMNS}
