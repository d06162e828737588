"""Telemetry written straight into a test database (nodes, GPUs, ports, samples, events, stragglers), and
find_evidence run over it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from gpuscope.health.evidence import DEFAULT_CONFIG, EvidenceConfig, find_evidence
from gpuscope.health.model import Evidence

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
STEP_S = 10


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def every_step(start: int, stop: int) -> range:
    """Sample offsets (s from T0) from `start` to `stop`, both included, one per STEP_S."""
    return range(start, stop + 1, STEP_S)


class Telemetry:
    """Writes through one autocommitting connection; the sample tables' partition for T0's day exists."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        for table in ("gpu_sample", "ib_port_sample"):
            conn.execute(
                sql.SQL("CREATE TABLE IF NOT EXISTS {} PARTITION OF {} FOR VALUES FROM ({}) TO ({})").format(
                    sql.Identifier(f"{table}_p{T0:%Y%m%d}"),
                    sql.Identifier(table),
                    sql.Literal(T0.replace(hour=0)),
                    sql.Literal(T0.replace(hour=0) + timedelta(days=1)),
                )
            )

    def node(self, name: str) -> int:
        return self._id("INSERT INTO node (cluster, name, rack) VALUES ('c', %s, 'r') RETURNING node_id", name)

    def gpu(self, node_id: int, index: int) -> int:
        return self._id(
            "INSERT INTO gpu (node_id, gpu_index, uuid, model, pci_bus_id) VALUES (%s, %s, %s, 'H100', '-')"
            " RETURNING gpu_id",
            node_id,
            index,
            f"GPU-{node_id}-{index}",
        )

    def gpus(self, node_id: int, count: int) -> list[int]:
        return [self.gpu(node_id, index) for index in range(count)]

    def port(self, node_id: int, device: str) -> int:
        return self._id(
            "INSERT INTO ib_port (node_id, device, port) VALUES (%s, %s, 1) RETURNING port_id", node_id, device
        )

    def gpu_samples(self, gpu_id: int, samples: Mapping[int, Mapping[str, Any] | None]) -> None:
        """offset (s from T0) -> the sample's values (up True unless given); None: nothing sent then."""
        self._samples(
            "gpu_sample", "gpu_id", gpu_id, {t: v if v is None else {"up": True, **v} for t, v in samples.items()}
        )

    def port_samples(self, port_id: int, samples: Mapping[int, Mapping[str, Any] | None]) -> None:
        self._samples("ib_port_sample", "port_id", port_id, samples)

    def event(
        self,
        node_id: int,
        gpu_id: int | None,
        seconds: float,
        kind: str,
        code: int | None = None,
        message: str | None = None,
        count: int = 1,
    ) -> None:
        self.conn.execute(
            "INSERT INTO event (ts, node_id, gpu_id, kind, code, count, message) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (at(seconds), node_id, gpu_id, kind, code, count, message),
        )

    def straggler(
        self, job_id: str, node_id: int, gpu_id: int | None, declared: datetime, cause: str = "thermal"
    ) -> None:
        self.conn.execute(
            "INSERT INTO straggler (job_id, node_id, gpu_id, cause, slowdown, started_at, declared_at)"
            " VALUES (%s, %s, %s, %s, 0.2, %s, %s)",
            (job_id, node_id, gpu_id, cause, declared - timedelta(minutes=5), declared),
        )

    def _samples(self, table: str, key: str, device: int, samples: Mapping[int, Mapping[str, Any] | None]) -> None:
        by_columns: dict[tuple[str, ...], list[list[Any]]] = {}
        for t, values in sorted(samples.items()):
            if values is not None:
                by_columns.setdefault(tuple(values), []).append([device, at(t), *values.values()])
        with self.conn.cursor() as cur:
            for columns, rows in by_columns.items():
                names = [key, "ts", *columns]
                cur.executemany(
                    sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                        sql.Identifier(table),
                        sql.SQL(", ").join(map(sql.Identifier, names)),
                        sql.SQL(", ").join(sql.Placeholder() * len(names)),
                    ),
                    rows,
                )

    def _id(self, statement: str, *params: Any) -> int:
        row = self.conn.execute(statement, params).fetchone()
        assert row is not None
        return int(row[0])


def find(dsn: str, since: datetime, until: datetime, config: EvidenceConfig = DEFAULT_CONFIG) -> list[Evidence]:
    async def run() -> list[Evidence]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            return await find_evidence(conn, since, until, config)

    return asyncio.run(run())


def on_node(found: Iterable[Evidence], node_id: int) -> list[Evidence]:
    return [e for e in found if e.node_id == node_id]
