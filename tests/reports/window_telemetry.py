"""Hand-built telemetry for usage reports over windows off the hour, with figures simple enough to compute by
hand (tests/reports/test_usage_window*.py). Six hours from 20:00 UTC two days back, a sample every 30 s:

- node n1, four H100s, all held by job `wide` (alice, account a1) from 20:30 to 01:30: utilisation 80 %,
  SM activity 60 %, tensor 10 %, 400 W; but GPU 0 is idle (all 0, 100 W) from 20:40 to 21:40, a 60-minute
  idle run: waste, also in a window that cuts it.
- node n2, one A100 (no SM activity reading), utilisation 2 %, 100 W: bob's job `short` from 21:05 to 21:40
  (35 idle minutes: waste), bob's `inside` from 22:20 to 22:50 (30 idle minutes: waste), carol's `late`
  from 00:20 to 00:40.

No energy counter: a GPU's energy is its mean power times the time held.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from gpuscope.collector.query.usage import Rates
from gpuscope.collector.store import partitions, retention, rollups, usage

STEP = timedelta(seconds=30)
H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"
RATES = Rates(currency="EUR", prices=(("*h100*", 2.0),), grid_g_per_kwh=500.0)
RATES_YAML = "currency: EUR\nprices:\n  - {model: '*h100*', per_gpu_hour: 2.0}\ngrid_g_per_kwh: 500\n"
BUSY = {"util": 80.0, "sm": 60.0, "tensor": 10.0, "watts": 400.0}
IDLE_H100 = {"util": 0.0, "sm": 0.0, "tensor": 0.0, "watts": 100.0}
A100_READING = {"util": 2.0, "sm": None, "tensor": None, "watts": 100.0}


@dataclass(frozen=True)
class Job:
    job: str
    user: str
    account: str
    node: str
    gpus: tuple[int, ...]  # indexes on the node
    start: timedelta  # from 20:00
    end: timedelta


def at(hours: int, minutes: int = 0) -> timedelta:
    """A time of the seeded night as an offset from 20:00 (at(0, 13) is 00:13 the next day)."""
    return timedelta(hours=(hours - 20) % 24, minutes=minutes)


JOBS = (
    Job("wide", "alice", "a1", "n1", (0, 1, 2, 3), at(20, 30), at(1, 30)),
    Job("short", "bob", "a2", "n2", (0,), at(21, 5), at(21, 40)),
    Job("inside", "bob", "a2", "n2", (0,), at(22, 20), at(22, 50)),
    Job("late", "carol", "a3", "n2", (0,), at(0, 20), at(0, 40)),
)
IDLE_RUN = (at(20, 40), at(21, 40))  # GPU 0 of n1


def night() -> datetime:
    """20:00 UTC two days back: the six hours are settled and final, and within every retention."""
    return (datetime.now(UTC) - timedelta(days=2)).replace(hour=20, minute=0, second=0, microsecond=0)


def reading(node: str, gpu: int, offset: timedelta) -> dict[str, Any]:
    if node == "n2":
        return A100_READING
    return IDLE_H100 if gpu == 0 and IDLE_RUN[0] <= offset < IDLE_RUN[1] else BUSY


def _samples(gpu_ids: dict[tuple[str, int], int], base: datetime) -> Iterator[tuple[Any, ...]]:
    offset = timedelta(0)
    while offset < timedelta(hours=6):
        for (node, gpu), gpu_id in gpu_ids.items():
            r = reading(node, gpu, offset)
            yield base + offset, gpu_id, r["util"], r["sm"], r["tensor"], r["watts"], True
        offset += STEP


def _one(conn: psycopg.Connection[Any], statement: str, params: tuple[Any, ...]) -> int:
    row = conn.execute(statement, params).fetchone()
    assert row is not None
    return int(row[0])


def seed(dsn: str) -> datetime:
    """The night in `dsn` (a migrated, empty database), rolled up and accounted as the collector's
    maintenance does it; returns its 20:00."""
    base = night()

    async def prepare() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await partitions.ensure(conn, {(base + timedelta(hours=h)).date() for h in range(-1, 8)})

    asyncio.run(prepare())
    with psycopg.connect(dsn) as conn:
        nodes = {
            name: _one(conn, "INSERT INTO node (cluster, name, rack) VALUES ('c', %s, 'r1') RETURNING node_id", (name,))
            for name in ("n1", "n2")
        }
        boards = [("n1", i, H100) for i in range(4)] + [("n2", 0, A100)]
        gpu_ids = {
            (node, index): _one(
                conn,
                "INSERT INTO gpu (node_id, gpu_index, uuid, model, pci_bus_id) VALUES (%s, %s, %s, %s, '-')"
                " RETURNING gpu_id",
                (nodes[node], index, f"GPU-{node}-{index}", model),
            )
            for node, index, model in boards
        }
        with conn.cursor().copy(
            "COPY gpu_sample (ts, gpu_id, util_pct, sm_active_pct, tensor_active_pct, power_w, up) FROM STDIN"
        ) as copy:
            for row in _samples(gpu_ids, base):
                copy.write_row(row)
        conn.execute(
            "INSERT INTO rollup_dirty_minute (bucket) SELECT generate_series(%s::timestamptz, %s, interval '1 minute')",
            (base, base + timedelta(hours=6) - timedelta(minutes=1)),
        )
        for job in JOBS:
            for gpu in job.gpus:
                conn.execute(
                    "INSERT INTO job_allocation (job_id, username, account, partition, node_id, gpu_id, started_at,"
                    " last_seen, ended_at) VALUES (%s, %s, %s, 'p1', %s, %s, %s, %s, %s)",
                    (job.job, job.user, job.account, nodes[job.node], gpu_ids[(job.node, gpu)], base + job.start,
                     base + job.end, base + job.end),
                )  # fmt: skip

    async def maintain() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            while await rollups.roll_up(conn):
                pass
            while await usage.update_usage(conn, keep=timedelta(days=3)):
                pass

    asyncio.run(maintain())
    return base


def drop_minutes_before(dsn: str, cutoff: datetime) -> None:
    """The retention pass as the collector runs it, with the minute rollups kept back to `cutoff` only (raw
    samples as long; hours and usage_1h for the default 730 days)."""
    now = datetime.now(UTC)
    kept = retention.Retention(raw=now - cutoff, minute_rollups=now - cutoff)

    async def apply() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await retention.apply(conn, kept, now)

    asyncio.run(apply())
