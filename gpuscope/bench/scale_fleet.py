"""The scale bench's fleet in its database: nodes of 8 GPUs and 8 InfiniBand ports (one per GPU, as on an
HGX H100 node), and their samples written as the collector stores a push: every column an exporter fills,
by binary COPY, with the push's ingest_batch row, its node_seen update and its dirty minutes.

Most GPUs run steady training work; a sprinkling of them is hot, power-capped, lost, idle in a job,
with rising ECC or NVLink error counters, and a few ports are down or erroring, so the alert rules and
the health rules find something, as they would at a site. Counters are functions of time alone, so
minutes may be written in any order (the bench writes history backwards)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import psycopg

from gpuscope.bench.fleet_db import create_fleet
from gpuscope.collector.store.columns import GPU_COLUMNS, NULL_INT, PORT_COLUMNS
from gpuscope.collector.store.copy_binary import CopyColumn, encode

GPUS_PER_NODE, PORTS_PER_NODE = 8, 8
STEP_S = 10  # the sampling (and push) interval
EPOCH_S = 1.7e9  # counters count from here
JOB_SHARE = 0.8  # of the nodes: one job each


@dataclass
class Fleet:
    nodes: int
    rng: np.random.Generator
    # Per GPU and per port (position = id - 1, as created), what it shows.
    hot: np.ndarray
    capped: np.ndarray
    lost: np.ndarray
    idle: np.ndarray
    ecc: np.ndarray
    nvlink: np.ndarray
    port_down: np.ndarray
    port_errors: np.ndarray
    lost_at: float  # when the lost GPUs fell off the bus: lately, so the health cycles find it

    @property
    def gpus(self) -> int:
        return self.nodes * GPUS_PER_NODE

    @property
    def ports(self) -> int:
        return self.nodes * PORTS_PER_NODE

    @property
    def jobs(self) -> int:
        return jobs_on(self.nodes)

    @property
    def rows_per_step(self) -> int:
        return self.gpus + self.ports


def jobs_on(nodes: int) -> int:
    return max(1, int(nodes * JOB_SHARE))


def create(conn: psycopg.Connection[Any], nodes: int, seed: int = 11) -> Fleet:
    """The inventory (bench/fleet_db.py), and which GPUs and ports misbehave."""
    create_fleet(conn, nodes, GPUS_PER_NODE, PORTS_PER_NODE)
    rng = np.random.default_rng(seed)
    gpus, ports = nodes * GPUS_PER_NODE, nodes * PORTS_PER_NODE
    chosen, flagged = rng.permutation(gpus), np.zeros((6, gpus), dtype=bool)
    counts = (gpus // 100, gpus // 100, gpus // 20_000 + 1, gpus // 100, gpus // 10_000 + 1, gpus // 5_000 + 1)
    at = 0
    for row, count in enumerate(counts):  # hot, capped, lost, idle, ecc, nvlink: disjoint
        flagged[row, chosen[at : at + count]] = True
        at += count
    flagged[3] &= np.arange(gpus) < jobs_on(nodes) * GPUS_PER_NODE  # idle in a job
    port_down, port_errors = np.zeros(ports, dtype=bool), np.zeros(ports, dtype=bool)
    picked = rng.permutation(ports)
    port_down[picked[: ports // 30_000 + 1]] = True
    port_errors[picked[ports // 30_000 + 1 : ports // 30_000 + 2 + ports // 10_000]] = True
    hot, capped, lost, idle, ecc, nvlink = flagged
    lost_at = time.time() // STEP_S * STEP_S - 120
    return Fleet(nodes, rng, hot, capped, lost, idle, ecc, nvlink, port_down, port_errors, lost_at)


def write(conn: psycopg.Connection[Any], fleet: Fleet, stamps: np.ndarray) -> int:
    """Every GPU's and port's sample at each of `stamps` (seconds), as one push per node and stamp, in
    one transaction; returns the sample rows written."""
    gpu_columns = ", ".join(["ts", "gpu_id", "up", *(c.key for c in GPU_COLUMNS)])
    port_columns = ", ".join(["ts", "port_id", *(c.key for c in PORT_COLUMNS)])
    with conn.transaction():
        for t in stamps:
            with conn.cursor().copy(f"COPY gpu_sample ({gpu_columns}) FROM STDIN (FORMAT BINARY)") as copy:
                copy.write(encode(_gpu_rows(fleet, float(t))))
            with conn.cursor().copy(f"COPY ib_port_sample ({port_columns}) FROM STDIN (FORMAT BINARY)") as copy:
                copy.write(encode(_port_rows(fleet, float(t))))
        times = [float(t) for t in stamps]
        conn.execute(
            "INSERT INTO ingest_batch (exporter_id, seq, node_id, received_at, gpu_rows, port_rows)"
            " SELECT md5('exporter-' || node_id)::uuid, (t / %s)::bigint, node_id, to_timestamp(t), %s, %s"
            " FROM node, unnest(%s::float8[]) AS t",
            (STEP_S, GPUS_PER_NODE, PORTS_PER_NODE, times),
        )
        conn.execute(
            "INSERT INTO node_seen (node_id, last_seen, push_interval_s) SELECT node_id, to_timestamp(%s), %s"
            " FROM node ON CONFLICT (node_id) DO UPDATE"
            " SET last_seen = greatest(node_seen.last_seen, EXCLUDED.last_seen)",
            (max(times), STEP_S),
        )
        conn.execute(
            "INSERT INTO rollup_dirty_minute (bucket) SELECT DISTINCT to_timestamp(floor(t / 60) * 60)"
            " FROM unnest(%s::float8[]) AS t ON CONFLICT DO NOTHING",
            (times,),
        )
    return len(stamps) * fleet.rows_per_step


def _gpu_rows(fleet: Fleet, t: float) -> list[CopyColumn]:
    n, rng = fleet.gpus, fleet.rng
    elapsed = t - EPOCH_S
    busy = (np.arange(n) < fleet.jobs * GPUS_PER_NODE) & ~fleet.idle
    hot, capped = fleet.hot, fleet.capped
    values: dict[str, Any] = {
        "util_pct": np.where(busy, rng.uniform(97, 100, n), np.where(fleet.idle, 1.0, 0.0)),
        "mem_copy_util_pct": np.where(busy, 20.0, 0.0),
        "sm_active_pct": np.where(busy, rng.normal(70, 1, n), 0.5),
        "tensor_active_pct": np.where(busy, rng.normal(40, 1, n), 0.0),
        "fb_used_bytes": np.where(busy, 70 * 2**30, 2**29),
        "fb_total_bytes": np.full(n, 80 * 2**30),
        "temp_c": np.where(hot, rng.uniform(88, 92, n), rng.normal(62, 3, n)),
        "mem_temp_c": np.where(hot, 95.0, 70.0),
        "power_w": np.where(capped, 695.0, np.where(busy, rng.normal(550, 30, n), 90.0)),
        "power_limit_w": np.full(n, 700.0),
        "energy_j": elapsed * 450.0 + np.arange(n),
        "sm_clock_mhz": np.where(hot, 1500.0, 1980.0),
        "mem_clock_mhz": np.full(n, 2619.0),
        "clock_event_reasons": np.where(hot, 0x40, np.where(capped, 0x4, 0)),
        "pcie_replay": np.zeros(n, dtype=np.int64),
        "ecc_corrected": np.zeros(n, dtype=np.int64),
        "ecc_uncorrected": np.where(fleet.ecc, int(elapsed // 120), 0),
        "pcie_tx_bytes_per_s": np.where(busy, 1e8, 1e5),
        "pcie_rx_bytes_per_s": np.where(busy, 1e8, 1e5),
        "throttle_power_s": np.where(capped, elapsed, 0.0),
        "throttle_thermal_s": np.where(hot, elapsed, 0.0),
        "remapped_rows_correctable": np.zeros(n, dtype=np.int64),
        "remapped_rows_uncorrectable": np.zeros(n, dtype=np.int64),
        "remap_pending": np.zeros(n, dtype=np.int64),
        "remap_failure": np.zeros(n, dtype=np.int64),
        "nvlink_tx_bytes": np.full(n, int(elapsed * 2e9)),
        "nvlink_rx_bytes": np.full(n, int(elapsed * 2e9)),
        "nvlink_crc_errors": np.where(fleet.nvlink, int(elapsed // 60), 0),
        "nvlink_replay_errors": np.zeros(n, dtype=np.int64),
        "nvlink_recovery_errors": np.zeros(n, dtype=np.int64),
        "recovery_action": np.zeros(n, dtype=np.int64),  # NVML's "none": the driver asks for nothing
    }
    up = ~(fleet.lost & (t >= fleet.lost_at))  # a lost GPU reports nothing but that
    columns = [
        CopyColumn("timestamptz", np.full(n, t)),
        CopyColumn("int4", np.arange(1, n + 1)),
        CopyColumn("bool", up),
    ]
    for column in GPU_COLUMNS:
        v = values[column.key]
        null = np.nan if column.pg_type.startswith("float") else NULL_INT
        v = v.astype(np.float64) if column.pg_type.startswith("float") else v.astype(np.int64)
        columns.append(CopyColumn(column.pg_type, np.where(up, v, null)))
    return columns


def _port_rows(fleet: Fleet, t: float) -> list[CopyColumn]:
    n = fleet.ports
    elapsed = t - EPOCH_S
    down = fleet.port_down
    values = {
        "xmit_bytes": np.full(n, int(elapsed * 4e9)),
        "rcv_bytes": np.full(n, int(elapsed * 4e9)),
        "xmit_packets": np.full(n, int(elapsed * 1e6)),
        "rcv_packets": np.full(n, int(elapsed * 1e6)),
        "xmit_wait": np.full(n, int(elapsed * 1e5)),
        "symbol_errors": np.where(fleet.port_errors, int(elapsed // 60), 0),
        "link_downed": np.zeros(n, dtype=np.int64),
        "rcv_errors": np.zeros(n, dtype=np.int64),
        "state": np.where(down, 1, 4),  # 4: ACTIVE
        "rate_gbps": np.full(n, 400.0),
        "link_error_recovery": np.zeros(n, dtype=np.int64),
        "xmit_discards": np.zeros(n, dtype=np.int64),
        "phys_state": np.where(down, 3, 5),  # 5: LinkUp
    }
    columns = [CopyColumn("timestamptz", np.full(n, t)), CopyColumn("int4", np.arange(1, n + 1))]
    for column in PORT_COLUMNS:
        kind = np.float64 if column.pg_type.startswith("float") else np.int64
        columns.append(CopyColumn(column.pg_type, np.asarray(values[column.key]).astype(kind)))
    return columns


def start_jobs(conn: psycopg.Connection[Any], fleet: Fleet, started: datetime) -> None:
    """One job per node on the first JOB_SHARE of the nodes, started at `started`; and XIDs over the last
    2 minutes on one GPU in 250, as the alert bench has them."""
    conn.execute(
        "INSERT INTO job_allocation (job_id, username, node_id, gpu_id, started_at, last_seen)"
        " SELECT 'job-' || node_id, 'user' || (node_id %% 500), node_id, gpu_id, %s, now() FROM gpu"
        " WHERE node_id <= %s",
        (started, fleet.jobs),
    )
    conn.execute(
        "INSERT INTO event (ts, node_id, gpu_id, kind, code, count)"
        " SELECT now() - make_interval(secs => gpu_id % 120), node_id, gpu_id, 'xid',"
        " (ARRAY[13, 31, 48, 79])[1 + gpu_id % 4], 1 FROM gpu WHERE gpu_id % 250 = 0"
    )
