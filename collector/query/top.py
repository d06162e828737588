"""GPUs ranked by a metric's newest value: the ten hottest now, the ten drawing most power.

Each GPU's newest sample is one backward step down its (gpu_id, ts) index, so the cost grows with the
GPUs, not with how many samples the last minutes hold. A GPU silent for FRESH_WITHIN has no value now
and is left out, as Prometheus leaves out a series past its look-back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from psycopg import Connection, sql

from gpuscope.collector.query.fleet import FRESH_WITHIN
from gpuscope.collector.query.inventory import GpuRow

Order = Literal["desc", "asc"]


@dataclass(frozen=True)
class TopGpu:
    gpu: GpuRow
    ts: datetime
    value: float


def top_gpus(
    conn: Connection[Any], metric: str, limit: int, order: Order = "desc", at: datetime | None = None
) -> list[TopGpu]:
    """`metric`: a gpu_sample column, checked by the caller against the known metric keys. `at`: rank
    as of that time (each GPU's newest sample up to it), as an instant query does; None: now."""
    direction = sql.SQL("DESC" if order == "desc" else "ASC")
    statement = sql.SQL(
        "SELECT g.gpu_id, n.cluster, n.rack, n.name, g.gpu_index, g.uuid, newest.ts, newest.value::float8"
        " FROM gpu g JOIN node n USING (node_id)"
        " CROSS JOIN LATERAL (SELECT s.ts, s.{metric} AS value FROM gpu_sample s"
        "   WHERE s.gpu_id = g.gpu_id AND s.ts <= %(at)s AND s.ts > %(at)s - %(fresh)s"
        "   ORDER BY s.ts DESC LIMIT 1) newest"
        " WHERE newest.value IS NOT NULL"
        " ORDER BY newest.value {direction}, g.gpu_id LIMIT %(limit)s"
    ).format(metric=sql.Identifier(metric), direction=direction)
    params = {"fresh": FRESH_WITHIN, "limit": limit, "at": at or datetime.now(UTC)}
    rows = conn.execute(statement, params).fetchall()
    return [TopGpu(GpuRow(*row[:6]), row[6], row[7]) for row in rows]
