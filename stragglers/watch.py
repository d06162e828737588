"""Runs the straggler detector over every running job, from the database, and stores what it declares.

Each cycle reads the samples that are complete since the last one (5 s buckets) for the GPUs of the open
job allocations and the InfiniBand ports of their nodes, feeds each job's detector in time order, and
writes new stragglers, their growing slowdown estimates and their ends to the `straggler` table. A
bucket is complete for a job once every GPU of it that still reports has a later sample: exporters push
in order, so the watch follows whatever push interval a site chose (10 s or 60 s) without a fixed
settling time that would either miss late samples or add to every straggler's latency. A job
new to this collector (or the collector itself, after a restart or a failover) is replayed from
REPLAY of history first, so its baselines are learnt before it is judged. Only one collector runs it at
a time: it is a leader task (stragglers/part.py), run by whoever holds its PostgreSQL advisory lock.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from psycopg import AsyncConnection

from gpuscope.collector.query.timerange import EPOCH
from gpuscope.stragglers.detector import JobDetector, Settings, Straggler

log = logging.getLogger(__name__)

SAMPLE = timedelta(seconds=5)
SILENT = timedelta(minutes=2)  # a GPU with no sample this long is not waited for (lost, or its node down)
REPLAY = timedelta(minutes=25)
LOCK_KEY = 0x67707374726167  # "gpstrag": the one active detector across collector replicas


@dataclass
class _Job:
    gpu_ids: list[int]  # ranks, ordered by node then GPU index
    node_ids: list[int]  # the job's nodes, in rank order
    port_ids: list[int]  # the InfiniBand ports of those nodes, in node order
    detector: JobDetector
    cursor: datetime  # the next bucket to feed
    stored: dict[int, int] = field(default_factory=dict)  # id(Straggler) -> straggler_id, while it is active


class StragglerWatch:
    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings(sample_s=SAMPLE.total_seconds())
        self.jobs: dict[str, _Job] = {}

    async def cycle(self, conn: AsyncConnection[Any], now: datetime | None = None) -> int:
        """Feed every running job's complete buckets to its detector; returns how many stragglers are active."""
        now = now or datetime.now(UTC)
        await self._follow_jobs(conn, _bucket(now))
        if not self.jobs:
            return 0
        gpu_ids = sorted({g for job in self.jobs.values() for g in job.gpu_ids})
        complete = await self._complete(conn, now, gpu_ids)
        start = min(job.cursor for job in self.jobs.values())
        end = max(complete.values())
        if start >= end:
            return 0
        gpu_rows, nic_rows = await self._samples(conn, start, end, gpu_ids)
        # Rows into arrays once per cycle, (values, id, bucket), so each job takes its slice.
        gpus = _Grid(gpu_rows, 5, start, end)  # tensor, util, clock, reasons, SM activity
        ports = _Grid(nic_rows, 3, start, end)  # wait rate, bytes rate, link rate
        for job_id, job in self.jobs.items():
            self._feed(job, gpus, ports, complete[job_id])
            await self._store(conn, job_id, job)
        return sum(job.detector.active is not None for job in self.jobs.values())

    async def _follow_jobs(self, conn: AsyncConnection[Any], end: datetime) -> None:
        cur = await conn.execute(
            "SELECT a.job_id, array_agg(a.gpu_id ORDER BY n.cluster, n.name, g.gpu_index),"
            "       array_agg(a.node_id ORDER BY n.cluster, n.name, g.gpu_index), min(a.started_at)"
            " FROM job_allocation a JOIN gpu g USING (gpu_id) JOIN node n ON n.node_id = a.node_id"
            # Whole GPUs only: MIG slices of different sizes are not peers, and their board-wide power and
            # clocks are shared with other jobs' slices.
            " WHERE a.ended_at IS NULL AND a.mig_id IS NULL GROUP BY a.job_id"
        )
        running = {job_id: (gpus, nodes, started) for job_id, gpus, nodes, started in await cur.fetchall()}
        cur = await conn.execute(
            "SELECT node_id, array_agg(port_id ORDER BY device, port) FROM ib_port WHERE node_id = ANY(%s)"
            " GROUP BY node_id",
            (sorted({node for _, nodes, _ in running.values() for node in nodes}),),
        )
        ports_of: dict[int, list[int]] = dict(await cur.fetchall())
        for job_id in set(self.jobs) - set(running):
            await self._finish(conn, job_id, end)
        for job_id, (gpus, nodes, started) in running.items():
            node_ids = list(dict.fromkeys(nodes))
            port_ids = [port for node in node_ids for port in ports_of.get(node, [])]
            known = self.jobs.get(job_id)
            if known is not None and (known.gpu_ids, known.port_ids) == (gpus, port_ids):
                continue
            if known is not None:  # the job grew or shrank, or a port appeared: its baselines no longer apply
                await self._finish(conn, job_id, end)
            position = {node: n for n, node in enumerate(node_ids)}
            detector = JobDetector.for_ranks(
                np.array([position[node] for node in nodes]),
                self.settings,
                port_node=np.array([position[node] for node in node_ids for _ in ports_of.get(node, [])], dtype=int),
            )
            cursor = _bucket(max(started, end - REPLAY))
            self.jobs[job_id] = _Job(gpus, node_ids, port_ids, detector, cursor)

    async def _complete(self, conn: AsyncConnection[Any], now: datetime, gpu_ids: list[int]) -> dict[str, datetime]:
        """Per job, the end of its complete buckets: the bucket of the oldest latest sample among its
        GPUs that reported in the last SILENT (a job none of whose GPUs report moves on regardless)."""
        cur = await conn.execute(
            "SELECT gpu_id, max(ts) FROM gpu_sample WHERE ts >= %s AND ts <= %s AND gpu_id = ANY(%s) GROUP BY gpu_id",
            (now - SILENT, now, gpu_ids),
        )
        latest: dict[int, datetime] = dict(await cur.fetchall())
        complete = {}
        for job_id, job in self.jobs.items():
            reported = [latest[g] for g in job.gpu_ids if g in latest]
            complete[job_id] = max(job.cursor, _bucket(min(reported) if reported else now - SILENT))
        return complete

    async def _samples(
        self, conn: AsyncConnection[Any], start: datetime, end: datetime, gpu_ids: list[int]
    ) -> tuple[list, list]:
        port_ids = sorted({p for job in self.jobs.values() for p in job.port_ids})
        params = {"bucket": SAMPLE, "origin": EPOCH, "start": start, "end": end, "gpus": gpu_ids, "ports": port_ids}
        cur = await conn.execute(
            # Tensor activity needs profiling counters (GPM on Hopper and later); SM activity stands in.
            "SELECT gpu_id, date_bin(%(bucket)s, ts, %(origin)s), avg(tensor_active_pct)::float8,"
            " avg(util_pct)::float8, avg(sm_clock_mhz)::float8, bit_or(clock_event_reasons)::float8,"
            " avg(sm_active_pct)::float8"
            " FROM gpu_sample WHERE ts >= %(start)s AND ts < %(end)s AND gpu_id = ANY(%(gpus)s) GROUP BY 1, 2",
            params,
        )
        gpu_rows = await cur.fetchall()
        # Per port, transmit waits and bytes per second from consecutive counter readings (a reading
        # lower than the one before is a counter reset: no rate for that interval), and the link rate.
        cur = await conn.execute(
            "SELECT port_id, date_bin(%(bucket)s, ts, %(origin)s),"
            " (sum(CASE WHEN d_wait >= 0 THEN d_wait END) / nullif(sum(CASE WHEN d_wait >= 0 THEN dt END), 0))::float8,"
            " (sum(CASE WHEN d_sent >= 0 THEN d_sent END) / nullif(sum(CASE WHEN d_sent >= 0 THEN dt END), 0))::float8,"
            " min(rate_gbps)::float8 FROM ("
            # float8: counters near the int64 bound must not overflow the difference
            "  SELECT port_id, ts, rate_gbps, xmit_wait::float8 - lag(xmit_wait::float8) OVER w AS d_wait,"
            "   xmit_bytes::float8 - lag(xmit_bytes::float8) OVER w AS d_sent,"
            "   extract(epoch FROM ts - lag(ts) OVER w) AS dt"
            "  FROM ib_port_sample WHERE ts >= %(start)s - interval '1 minute' AND ts < %(end)s"
            "  AND port_id = ANY(%(ports)s) WINDOW w AS (PARTITION BY port_id ORDER BY ts)) AS s"
            " WHERE ts >= %(start)s GROUP BY 1, 2",
            params,
        )
        return gpu_rows, await cur.fetchall()

    def _feed(self, job: _Job, gpus: _Grid, ports: _Grid, end: datetime) -> None:
        if end <= job.cursor:
            return
        gpu = gpus.take(job.gpu_ids, job.cursor, end)
        wait, sent, link = ports.take(job.port_ids, job.cursor, end)
        activity = gpu[0] if np.isfinite(gpu[0]).any() or not np.isfinite(gpu[4]).any() else gpu[4]
        first = job.cursor.timestamp()
        for step in range(gpu.shape[2]):
            t = first + step * SAMPLE.total_seconds()
            job.detector.update(
                t, activity[:, step], gpu[1, :, step], gpu[2, :, step], gpu[3, :, step], wait[:, step], link[:, step],
                sent[:, step],
            )  # fmt: skip
        job.cursor = end

    async def _store(self, conn: AsyncConnection[Any], job_id: str, job: _Job) -> None:
        for straggler in job.detector.declared:
            key = id(straggler)
            if key not in job.stored:
                job.stored[key] = await self._insert(conn, job_id, job, straggler)
                log.warning(
                    "straggler in job %s: node %s gpu %s port %s, %s, job %.0f%% slower",
                    job_id, job.node_ids[straggler.node], straggler.gpu, _port_id(job, straggler), straggler.cause,
                    100 * straggler.slowdown,
                )  # fmt: skip
            else:
                await conn.execute(
                    "UPDATE straggler SET slowdown = %s, ended_at = %s WHERE straggler_id = %s",
                    (straggler.slowdown, _at(straggler.ended_s), job.stored[key]),
                )
        # Ended ones are final in the table: forget them, and their ids with them (an id() is reused
        # once its object is gone, so a stale entry could pass a new straggler off as stored).
        for straggler in job.detector.declared:
            if straggler.ended_s is not None:
                job.stored.pop(id(straggler), None)
        job.detector.declared = [s for s in job.detector.declared if s.ended_s is None]

    async def _insert(self, conn: AsyncConnection[Any], job_id: str, job: _Job, straggler: Straggler) -> int:
        node_id = job.node_ids[straggler.node]
        gpu_id = None
        if straggler.gpu is not None:
            ranks = [r for r, n in enumerate(job.detector.node_of) if n == straggler.node]
            gpu_id = job.gpu_ids[ranks[straggler.gpu]]
        # A watch that took over (a restart, another replica) replays the job's history and finds again
        # what its predecessor stored: adopt that row rather than store the straggler twice.
        cur = await conn.execute(
            "SELECT straggler_id FROM straggler WHERE job_id = %s AND node_id = %s AND gpu_id IS NOT DISTINCT FROM %s"
            " AND port_id IS NOT DISTINCT FROM %s AND cause = %s"
            " AND (ended_at IS NULL OR ended_at >= %s - interval '1 minute') ORDER BY started_at DESC LIMIT 1",
            (job_id, node_id, gpu_id, _port_id(job, straggler), straggler.cause, _at(straggler.started_s)),
        )
        if found := await cur.fetchone():
            await conn.execute(
                "UPDATE straggler SET slowdown = %s, ended_at = %s WHERE straggler_id = %s",
                (straggler.slowdown, _at(straggler.ended_s), found[0]),
            )
            return int(found[0])
        cur = await conn.execute(
            "INSERT INTO straggler (job_id, node_id, gpu_id, port_id, cause, slowdown, evidence, started_at,"
            " declared_at, ended_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING straggler_id",
            (
                job_id,
                node_id,
                gpu_id,
                _port_id(job, straggler),
                straggler.cause,
                straggler.slowdown,
                json.dumps({k: v for k, v in straggler.evidence.items() if math.isfinite(v)}),  # JSON has no NaN
                _at(straggler.started_s),
                _at(straggler.declared_s),
                _at(straggler.ended_s),
            ),
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])

    async def _finish(self, conn: AsyncConnection[Any], job_id: str, end: datetime) -> None:
        """The job ended (or changed shape): an active straggler ends with it."""
        job = self.jobs.pop(job_id)
        active = job.detector.active
        if active is not None and id(active) in job.stored:
            await conn.execute(
                "UPDATE straggler SET ended_at = %s WHERE straggler_id = %s", (end, job.stored[id(active)])
            )


class _Grid:
    """Rows of (id, bucket, *values) as an array (values, ids, buckets) from `start` to `end`; NaN for
    what is missing."""

    def __init__(self, rows: list, values: int, start: datetime, end: datetime) -> None:
        self.start = start
        self.row_of = {key: i for i, key in enumerate(dict.fromkeys(row[0] for row in rows))}
        self.data = np.full((values, len(self.row_of) + 1, int((end - start) / SAMPLE)), np.nan)  # last row: none
        for key, bucket, *row_values in rows:
            step = round((bucket - start) / SAMPLE)
            if 0 <= step < self.data.shape[2]:
                self.data[:, self.row_of[key], step] = [np.nan if v is None else v for v in row_values]

    def take(self, keys: list[int], start: datetime, end: datetime) -> np.ndarray:
        rows = [self.row_of.get(key, -1) for key in keys]
        first = round((start - self.start) / SAMPLE)
        return self.data[:, rows, first : first + round((end - start) / SAMPLE)]


def _port_id(job: _Job, straggler: Straggler) -> int | None:
    return None if straggler.port is None else job.port_ids[straggler.port]


def _bucket(at: datetime) -> datetime:
    seconds = SAMPLE.total_seconds()
    return EPOCH + timedelta(seconds=int(at.timestamp() // seconds * seconds))


def _at(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)
