"""Which node a GPU or port is on, and its name there ("GPU 3", "mlx5_1 port 1"), for the evidence."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection


@dataclass(frozen=True)
class GpuPlace:
    node_id: int
    gpu_index: int


@dataclass(frozen=True)
class PortPlace:
    node_id: int
    name: str  # "mlx5_1 port 1"


async def gpu_places(conn: AsyncConnection[Any], gpu_ids: Iterable[int]) -> dict[int, GpuPlace]:
    ids = sorted(set(gpu_ids))
    if not ids:
        return {}
    cur = await conn.execute("SELECT gpu_id, node_id, gpu_index FROM gpu WHERE gpu_id = ANY(%s)", (ids,))
    return {gpu_id: GpuPlace(node_id, index) for gpu_id, node_id, index in await cur.fetchall()}


async def port_places(conn: AsyncConnection[Any], port_ids: Iterable[int]) -> dict[int, PortPlace]:
    ids = sorted(set(port_ids))
    if not ids:
        return {}
    cur = await conn.execute("SELECT port_id, node_id, device, port FROM ib_port WHERE port_id = ANY(%s)", (ids,))
    rows = await cur.fetchall()
    return {port_id: PortPlace(node_id, f"{device} port {port}") for port_id, node_id, device, port in rows}
