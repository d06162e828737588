"""Health of a node's GPUs and InfiniBand ports over a range, from their counters and states
(collector/query/counters.py): ECC errors and row remapping, NVLink errors, and each port's link state,
rate and error counters. Every GPU and port of the node gets a row, reporting or not."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import Connection, sql

from gpuscope.collector.query.counters import CounterUse, StateUse, Summary, summarise
from gpuscope.collector.query.inventory import GpuRow, PortRow, select_ports
from gpuscope.collector.query.timerange import TimeRange

NVLINK_COUNTERS = ("nvlink_crc_errors", "nvlink_replay_errors", "nvlink_recovery_errors")
GPU_COUNTERS = (
    "ecc_corrected",
    "ecc_uncorrected",
    "remapped_rows_correctable",
    "remapped_rows_uncorrectable",
    *NVLINK_COUNTERS,
)
GPU_FLAGS: dict[str, float | None] = {"remap_pending": 0, "remap_failure": 0}  # 1: waits for a reset; failed
PORT_COUNTERS = ("link_downed", "symbol_errors", "rcv_errors", "link_error_recovery", "xmit_discards")
# Good values: logical state 4 (Active), physical state 5 (LinkUp); the rate has none, its changes count.
PORT_STATES: dict[str, float | None] = {"state": 4, "phys_state": 5, "rate_gbps": None}

NOT_REPORTED = CounterUse(None, None, None, None)
NO_STATE = StateUse(None, None, 0, None)


@dataclass(frozen=True)
class Health:
    """One device's counters and states over the range; `summary` None: no sample in reach."""

    summary: Summary | None

    @property
    def last_seen(self) -> datetime | None:
        return self.summary.last_seen if self.summary else None

    def counter(self, key: str) -> CounterUse:
        return self.summary.counters.get(key, NOT_REPORTED) if self.summary else NOT_REPORTED

    def state(self, key: str) -> StateUse:
        return self.summary.states.get(key, NO_STATE) if self.summary else NO_STATE


@dataclass(frozen=True)
class GpuHealth(Health):
    gpu: GpuRow

    @property
    def has_nvlink(self) -> bool:
        return any(self.counter(key).latest is not None for key in NVLINK_COUNTERS)


@dataclass(frozen=True)
class PortHealth(Health):
    port: PortRow


def node_gpus(conn: Connection[Any], node: str) -> list[GpuRow]:
    """The node's GPUs, by index."""
    rows = conn.execute(
        "SELECT g.gpu_id, n.cluster, n.rack, n.name, g.gpu_index, g.uuid FROM gpu g JOIN node n USING (node_id)"
        " WHERE n.name = %s ORDER BY n.cluster, n.rack, g.gpu_index",
        (node,),
    ).fetchall()
    return [GpuRow(*row) for row in rows]


def gpu_health(conn: Connection[Any], gpus: list[GpuRow], time_range: TimeRange) -> list[GpuHealth]:
    """Read from the rows where the GPU answered: a GPU off the bus reports nothing, and its counters'
    steps span the outage rather than stopping at it."""
    ids = [g.gpu_id for g in gpus]
    found = summarise(conn, "gpu_sample", "gpu_id", ids, GPU_COUNTERS, GPU_FLAGS, time_range, sql.SQL("up"))
    return [GpuHealth(found.get(g.gpu_id), g) for g in gpus]


def port_health(conn: Connection[Any], node: str, time_range: TimeRange) -> list[PortHealth]:
    ports = select_ports(conn, nodes=[node])
    ids = [p.port_id for p in ports]
    found = summarise(conn, "ib_port_sample", "port_id", ids, PORT_COUNTERS, PORT_STATES, time_range)
    return [PortHealth(found.get(p.port_id), p) for p in ports]
