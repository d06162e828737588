"""Stores one validated batch in one transaction: inventory, the batch marker, then binary COPY.

The batch marker row (exporter_id, seq) makes retries idempotent: if it exists, the batch was stored
before and nothing else is written. Either everything in a batch is committed or nothing is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from psycopg import AsyncConnection, sql
from psycopg_pool import AsyncConnectionPool

from gpuscope.collector.store import allocations, events, partitions, rollups
from gpuscope.collector.store.batch import Batch, MigInfo, Samples
from gpuscope.collector.store.columns import GPU_COLUMNS, MIG_COLUMNS, NULL_INT, PORT_COLUMNS, Column
from gpuscope.collector.store.copy_binary import CopyColumn
from gpuscope.collector.store.copy_binary import encode as encode_copy
from gpuscope.collector.store.timescale import Layout


@dataclass(frozen=True)
class StoreResult:
    duplicate: bool
    gpu_rows: int
    port_rows: int
    mig_rows: int = 0


class InventoryCache:
    """Ids of nodes, GPUs and ports already in the database, so steady-state batches skip the upserts,
    and the storage layout they are written to.

    Entries are added only after the transaction that created them commits. Each table is emptied when
    it reaches MAX_IDS (a node's token may rename its GPUs in every batch; each name would stay cached).
    """

    MAX_IDS = 200_000

    def __init__(self, layout: Layout = "plain") -> None:
        # TimescaleDB makes its own chunks and keeps its own aggregates: no partitions or dirty minutes.
        self.plain_layout = layout == "plain"
        self.nodes: dict[tuple[str, str, str], int] = {}
        self.gpus: dict[tuple[int, int, str, str, str], int] = {}
        self.ports: dict[tuple[int, str, int], int] = {}
        self.migs: dict[tuple[int, MigInfo], int] = {}  # (parent gpu_id, as sent) -> mig_id
        self.partition_days: set[int] = set()  # days (since the epoch) whose sample partitions exist

    def forget(self) -> None:
        """Drop every id: after a failover the new primary is asked again (cheap, once per node), so no
        id of a server whose timeline is rewound can outlive it here."""
        for table in (self.nodes, self.gpus, self.ports, self.migs):
            table.clear()
        self.partition_days.clear()


# Cache insertions to apply once the transaction commits: (cache table, key, id).
PendingEntries = list[tuple[dict[Any, int], Any, int]]


async def store_batch(pool: AsyncConnectionPool, batch: Batch, cache: InventoryCache) -> StoreResult:
    return (await store_batches(pool, [batch], cache))[0]


async def store_batches(pool: AsyncConnectionPool, batches: list[Batch], cache: InventoryCache) -> list[StoreResult]:
    """Store several batches in one transaction with one COPY per table (group commit): the per-batch
    cost of a transaction and of a COPY is shared. Results are in the order of `batches`.

    Rows are locked in one global order, node by node and batch by batch (lock_order), in every step, so
    two groups holding the same nodes or the same retried batches in other orders cannot deadlock."""
    order = sorted(range(len(batches)), key=lambda n: lock_order(batches[n]))
    results = dict(zip(order, await _store_in_order(pool, [batches[n] for n in order], cache), strict=True))
    return [results[n] for n in range(len(batches))]


def lock_order(batch: Batch) -> tuple[str, str, str, int]:
    return (batch.cluster, batch.node, str(batch.exporter_id), batch.seq)


async def _store_in_order(pool: AsyncConnectionPool, batches: list[Batch], cache: InventoryCache) -> list[StoreResult]:
    if cache.plain_layout:
        await _ensure_partitions(pool, batches, cache)
    new_entries: PendingEntries = []
    async with pool.connection() as conn, conn.transaction():
        ids = []
        for batch in batches:
            node_id = await _node_id(conn, batch, cache, new_entries)
            gpu_ids = await _gpu_ids(conn, node_id, batch, cache, new_entries)
            port_ids = await _port_ids(conn, node_id, batch, cache, new_entries)
            ids.append((node_id, gpu_ids, port_ids))
        fresh = await _mark_batches(conn, batches, [node_id for node_id, _, _ in ids])
        gpu_parts, port_parts, mig_parts = [], [], []
        mig_ids: list[list[int]] = []
        for batch, (_, gpu_ids, port_ids), is_fresh in zip(batches, ids, fresh, strict=True):
            mig_ids.append(await _mig_ids(conn, gpu_ids, batch, cache, new_entries) if is_fresh else [])
            if is_fresh:
                if batch.mig_samples is not None:
                    mig_parts.append((batch.mig_samples, np.array(mig_ids[-1], dtype=np.int64)))
                gpu_index_to_id = np.zeros(max(gpu_ids, default=0) + 1, dtype=np.int64)
                for index, gpu_id in gpu_ids.items():
                    gpu_index_to_id[index] = gpu_id
                gpu_parts.append((batch.gpu_samples, gpu_index_to_id))
                port_parts.append((batch.port_samples, np.array(port_ids, dtype=np.int64)))
        await _copy(conn, "gpu_sample", "gpu_id", GPU_COLUMNS, gpu_parts)
        if cache.plain_layout:
            await rollups.mark_dirty(conn, np.concatenate([samples.ts for samples, _ in gpu_parts] or [np.empty(0)]))
        await _copy(conn, "ib_port_sample", "port_id", PORT_COLUMNS, port_parts)
        await _copy(conn, "mig_sample", "mig_id", MIG_COLUMNS, mig_parts)
        for batch, (node_id, gpu_ids, _), migs, is_fresh in zip(batches, ids, mig_ids, fresh, strict=True):
            if is_fresh:
                await allocations.record(conn, node_id, gpu_ids, batch)
                await allocations.record_mig(conn, node_id, gpu_ids, migs, batch)
                await events.record(conn, node_id, gpu_ids, batch)
        await _mark_seen(conn, [node_id for node_id, _, _ in ids])
    for table, key, value in new_entries:
        if len(table) >= cache.MAX_IDS:
            table.clear()  # ids are found again on a miss: only the upsert is repeated
        table[key] = value
    return [
        StoreResult(
            duplicate=False,
            gpu_rows=len(b.gpu_samples),
            port_rows=len(b.port_samples),
            mig_rows=len(b.mig_samples) if b.mig_samples is not None else 0,
        )
        if is_fresh
        else StoreResult(duplicate=True, gpu_rows=0, port_rows=0)
        for b, is_fresh in zip(batches, fresh, strict=True)
    ]


async def _mark_batches(conn: AsyncConnection[Any], batches: list[Batch], node_ids: list[int]) -> list[bool]:
    """Insert the (exporter_id, seq) markers; True for each batch not stored before (nor earlier in the list)."""
    cur = await conn.execute(
        "INSERT INTO ingest_batch (exporter_id, seq, node_id, gpu_rows, port_rows)"
        " SELECT * FROM unnest(%s::uuid[], %s::bigint[], %s::int[], %s::int[], %s::int[])"
        " ON CONFLICT DO NOTHING RETURNING exporter_id, seq",
        (
            [b.exporter_id for b in batches],
            [b.seq for b in batches],
            node_ids,
            [len(b.gpu_samples) for b in batches],
            [len(b.port_samples) for b in batches],
        ),
    )
    inserted = {(row[0], row[1]) for row in await cur.fetchall()}
    fresh = []
    for batch in batches:
        key = (batch.exporter_id, batch.seq)
        fresh.append(key in inserted)
        inserted.discard(key)  # the same batch twice in one group: the first copy is the one stored
    return fresh


async def _mark_seen(conn: AsyncConnection[Any], node_ids: list[int]) -> None:
    """Each node's last push and smoothed push interval, for the exporter-down alert. Retried batches count
    too (the exporter is alive). Rows are locked in node order, so concurrent groups cannot deadlock."""
    await conn.execute(
        "INSERT INTO node_seen AS s (node_id, last_seen)"
        " SELECT id, now() FROM unnest(%s::int[]) AS id"
        " ON CONFLICT (node_id) DO UPDATE SET"
        "  push_interval_s = CASE"
        "   WHEN EXCLUDED.last_seen - s.last_seen < interval '50 milliseconds' THEN s.push_interval_s"
        "   WHEN s.push_interval_s IS NULL THEN extract(epoch FROM EXCLUDED.last_seen - s.last_seen)"
        # smoothed, and one long outage moves it only so far
        "   ELSE 0.8 * s.push_interval_s + 0.2 * least(extract(epoch FROM EXCLUDED.last_seen - s.last_seen),"
        "                                              4 * s.push_interval_s) END,"
        "  last_seen = greatest(s.last_seen, EXCLUDED.last_seen)",
        (sorted(set(node_ids)),),
    )


async def _ensure_partitions(pool: AsyncConnectionPool, batches: list[Batch], cache: InventoryCache) -> None:
    """Late or early data may need a day's partition that maintenance has not made: make it first, in a
    transaction of its own (DDL would hold the batch's locks longer than it should)."""
    blocks = [b.gpu_samples.ts for b in batches if len(b.gpu_samples)]
    blocks += [b.port_samples.ts for b in batches if len(b.port_samples)]
    blocks += [b.mig_samples.ts for b in batches if b.mig_samples is not None and len(b.mig_samples)]
    if not blocks:
        return
    first = int(min(block.min() for block in blocks) // 86400)
    last = int(max(block.max() for block in blocks) // 86400)
    if first in cache.partition_days and last in cache.partition_days and last - first <= 1:
        return  # the usual case: today (and perhaps yesterday, just after midnight), known to exist
    days = {int(d) for d in np.unique(np.floor(np.concatenate(blocks) / 86400))}
    missing = days - cache.partition_days
    async with pool.connection() as conn, conn.transaction():
        await partitions.ensure(conn, {partitions.day_of(d * 86400.0) for d in missing})
    cache.partition_days |= missing


async def _node_id(conn: AsyncConnection[Any], batch: Batch, cache: InventoryCache, new: PendingEntries) -> int:
    key = (batch.cluster, batch.node, batch.rack)
    if key in cache.nodes:
        return cache.nodes[key]
    cur = await conn.execute(
        "INSERT INTO node (cluster, name, rack) VALUES (%s, %s, %s)"
        " ON CONFLICT (cluster, name) DO UPDATE SET rack = EXCLUDED.rack RETURNING node_id",
        key,
    )
    row = await cur.fetchone()
    assert row is not None
    new.append((cache.nodes, key, row[0]))
    return int(row[0])


async def _gpu_ids(
    conn: AsyncConnection[Any], node_id: int, batch: Batch, cache: InventoryCache, new: PendingEntries
) -> dict[int, int]:
    ids: dict[int, int] = {}
    missing = []
    for gpu in batch.gpus:
        key = (node_id, gpu.index, gpu.uuid, gpu.model, gpu.pci_bus_id)
        if key in cache.gpus:
            ids[gpu.index] = cache.gpus[key]
        else:
            missing.append(gpu)
    if missing:
        missing.sort(key=lambda g: g.index)  # rows locked in index order (lock_order)
        cur = await conn.execute(
            "INSERT INTO gpu (node_id, gpu_index, uuid, model, pci_bus_id)"
            " SELECT %s, * FROM unnest(%s::smallint[], %s::text[], %s::text[], %s::text[])"
            # "" is an identity the exporter does not know (a GPU it could not open): keep what is stored
            " ON CONFLICT (node_id, gpu_index) DO UPDATE"
            " SET uuid = COALESCE(NULLIF(EXCLUDED.uuid, ''), gpu.uuid),"
            "  model = COALESCE(NULLIF(EXCLUDED.model, ''), gpu.model),"
            "  pci_bus_id = COALESCE(NULLIF(EXCLUDED.pci_bus_id, ''), gpu.pci_bus_id)"
            " RETURNING gpu_index, gpu_id",
            (
                node_id,
                [g.index for g in missing],
                [g.uuid for g in missing],
                [g.model for g in missing],
                [g.pci_bus_id for g in missing],
            ),
        )
        by_index = {gpu.index: gpu for gpu in missing}
        for index, gpu_id in await cur.fetchall():
            gpu = by_index[index]
            ids[index] = gpu_id
            new.append((cache.gpus, (node_id, index, gpu.uuid, gpu.model, gpu.pci_bus_id), gpu_id))
    return ids


async def _port_ids(
    conn: AsyncConnection[Any], node_id: int, batch: Batch, cache: InventoryCache, new: PendingEntries
) -> list[int]:
    """Port ids in the batch's `ports` order (samples refer to ports by position)."""
    keys = [(node_id, p.device, p.port) for p in batch.ports]
    missing = sorted({k for k in keys if k not in cache.ports})  # rows locked in one order (lock_order)
    if missing:
        cur = await conn.execute(
            "INSERT INTO ib_port (node_id, device, port)"
            " SELECT %s, * FROM unnest(%s::text[], %s::smallint[])"
            " ON CONFLICT (node_id, device, port) DO UPDATE SET device = EXCLUDED.device"
            " RETURNING device, port, port_id",
            (node_id, [k[1] for k in missing], [k[2] for k in missing]),
        )
        found = {(node_id, device, port): port_id for device, port, port_id in await cur.fetchall()}
        new.extend((cache.ports, key, port_id) for key, port_id in found.items())
    else:
        found = {}
    return [cache.ports.get(k) or found[k] for k in keys]


async def _mig_ids(
    conn: AsyncConnection[Any], gpu_ids: dict[int, int], batch: Batch, cache: InventoryCache, new: PendingEntries
) -> list[int]:
    """MIG device ids in the batch's `migs` order (its rows refer to them by position)."""
    keys = [(gpu_ids[m.gpu], m) for m in batch.migs]
    missing = sorted({k for k in keys if k not in cache.migs}, key=lambda k: (k[0], k[1].uuid))  # one lock order
    found: dict[tuple[int, MigInfo], int] = {}
    if missing:
        cur = await conn.execute(
            "INSERT INTO mig_device (gpu_id, gpu_instance_id, compute_instance_id, uuid, profile, slices, gpu_slices)"
            " SELECT * FROM unnest(%s::int[], %s::smallint[], %s::smallint[], %s::text[], %s::text[],"
            "  %s::smallint[], %s::smallint[])"
            " ON CONFLICT (gpu_id, uuid) DO UPDATE SET gpu_instance_id = EXCLUDED.gpu_instance_id,"
            "  compute_instance_id = EXCLUDED.compute_instance_id, profile = EXCLUDED.profile,"
            "  slices = EXCLUDED.slices, gpu_slices = EXCLUDED.gpu_slices"
            " RETURNING gpu_id, uuid, mig_id",
            (
                [gpu_id for gpu_id, _ in missing],
                [m.gpu_instance_id for _, m in missing],
                [m.compute_instance_id for _, m in missing],
                [m.uuid for _, m in missing],
                [m.profile for _, m in missing],
                [m.slices for _, m in missing],
                [m.gpu_slices for _, m in missing],
            ),
        )
        returned = {(gpu_id, uuid_): mig_id for gpu_id, uuid_, mig_id in await cur.fetchall()}
        for gpu_id, mig in missing:
            found[(gpu_id, mig)] = returned[(gpu_id, mig.uuid)]
            new.append((cache.migs, (gpu_id, mig), found[(gpu_id, mig)]))
    return [cache.migs.get(k) or found[k] for k in keys]


async def _copy(
    conn: AsyncConnection[Any],
    table: str,
    id_column: str,
    columns: tuple[Column, ...],
    parts: list[tuple[Samples, np.ndarray]],
) -> None:
    """One binary COPY of the rows of every (samples, device index -> id) part."""
    parts = [(samples, ids) for samples, ids in parts if len(samples)]
    if not parts:
        return
    with_up = parts[0][0].up is not None
    present = [c for c in columns if any(c.key in samples.values for samples, _ in parts)]
    copy_columns = [
        CopyColumn("timestamptz", np.concatenate([samples.ts for samples, _ in parts])),
        CopyColumn("int4", np.concatenate([ids[samples.device] for samples, ids in parts])),
    ]
    names = ["ts", id_column]
    if with_up:
        copy_columns.append(CopyColumn("bool", np.concatenate([samples.up for samples, _ in parts])))
        names.append("up")
    for column in present:
        # A part without the column: NULLs of its kind (NaN would make an int64 column doubles, inexact).
        missing = NULL_INT if column.integer else np.nan
        values = [
            samples.values[column.key] if column.key in samples.values else np.full(len(samples), missing)
            for samples, _ in parts
        ]
        copy_columns.append(CopyColumn(column.pg_type, np.concatenate(values)))
        names.append(column.key)
    stmt = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
        sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, names))
    )
    async with conn.cursor() as cur, cur.copy(stmt) as copy:
        await copy.write(encode_copy(copy_columns))
