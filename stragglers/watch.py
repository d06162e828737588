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
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from psycopg import AsyncConnection, AsyncCursor

from gpuscope.collector.query.timerange import EPOCH
from gpuscope.stragglers.batch import BatchedDetector, DetectorBatch, DetectorBatches
from gpuscope.stragglers.detector import Settings
from gpuscope.stragglers.events import Straggler, StragglerEvent, StragglerKey
from gpuscope.stragglers.readings import ReadingRows
from gpuscope.stragglers.reads import culprit_words

log = logging.getLogger(__name__)

SAMPLE = timedelta(seconds=5)
SILENT = timedelta(minutes=2)  # a GPU with no sample this long is not waited for (lost, or its node down)
REPLAY = timedelta(minutes=25)
AGGRESSOR_RISE = 0.3  # a job on shared nodes sending this much more than usual is named for a fabric finding
MODEL_REFRESH = timedelta(minutes=1)  # how often a job's judging model (and its measure) is written again
JOBS_PER_PASS = 4096  # jobs of one layout fed together, at most
LOCK_KEY = 0x67707374726167  # "gpstrag": the one active detector across collector replicas


@dataclass
class _Finding:
    """A straggler as the watch stores it: the detector's latest report of it, what the watch added (the
    job whose traffic it names for a fabric finding), and its row once stored."""

    straggler: Straggler
    row_id: int | None = None
    changed: bool = True  # since its row was last written
    aggressor: str | None = None
    aggressor_evidence: dict[str, float] = field(default_factory=dict)

    @property
    def evidence(self) -> dict[str, float]:
        return self.straggler.evidence | self.aggressor_evidence


@dataclass
class _Job:
    cluster: str
    gpu_ids: list[int]  # ranks, ordered by node then GPU index
    node_ids: list[int]  # the job's nodes, in rank order
    port_ids: list[int]  # the InfiniBand ports of those nodes, in node order
    detector: BatchedDetector  # a row of its layout's batch (stragglers/batch.py)
    cursor: datetime  # the next bucket to feed
    # The stragglers its detector declared that have not ended, and those that ended since the last store.
    findings: dict[StragglerKey, _Finding] = field(default_factory=dict)
    model_stored: tuple[str, datetime] | None = None  # the judging model last written, and when
    # (time, bytes per second the job sent per port) over the last hour, whatever its detector judges (a
    # job writing a checkpoint is paused to its detector, not to its neighbours)
    sent: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=720))

    @property
    def active(self) -> _Finding | None:
        return next((f for f in self.findings.values() if f.straggler.ended_s is None), None)

    def follow(self, events: Iterable[StragglerEvent]) -> None:
        """Keep what the detector reported: a straggler declared, or the latest figures of one."""
        for event in events:
            if event.kind == "declared":
                self.findings[event.key] = _Finding(event.straggler)
            else:
                finding = self.findings[event.key]
                finding.straggler, finding.changed = event.straggler, True


class StragglerWatch:
    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings(sample_s=SAMPLE.total_seconds())
        self.jobs: dict[str, _Job] = {}
        self._nvlink_errors: dict[int, float] = {}  # gpu_id -> its NVLink error counter at the last bucket fed
        self._detectors = DetectorBatches(self.settings)

    async def cycle(
        self, conn: AsyncConnection[Any], now: datetime | None = None, owns: Callable[[str], bool] | None = None
    ) -> int:
        """Feed every running job's complete buckets to its detector; returns how many stragglers are active.
        `owns(job_id)`: whether this watch leads that job (its shard, core/shards.py); None: every job."""
        now = now or datetime.now(UTC)
        await self._follow_jobs(conn, _bucket(now), owns)
        if not self.jobs:
            return 0
        gpu_ids = sorted({g for job in self.jobs.values() for g in job.gpu_ids})
        complete = await self._complete(conn, now, gpu_ids)
        start = min(job.cursor for job in self.jobs.values())
        end = max(complete.values())
        if start >= end:
            return 0
        gpus, ports = await self._samples(conn, start, end, gpu_ids)
        self._feed(gpus, ports, complete)
        self._name_aggressors()
        for job_id, job in self.jobs.items():
            await self._store(conn, job_id, job)
        await self._store_models(conn, now)
        return sum(job.active is not None for job in self.jobs.values())

    async def _follow_jobs(
        self, conn: AsyncConnection[Any], end: datetime, owns: Callable[[str], bool] | None = None
    ) -> None:
        cur = await conn.execute(
            "SELECT a.job_id, array_agg(a.gpu_id ORDER BY n.cluster, n.name, g.gpu_index),"
            "       array_agg(a.node_id ORDER BY n.cluster, n.name, g.gpu_index), min(a.started_at), min(n.cluster)"
            " FROM job_allocation a JOIN gpu g USING (gpu_id) JOIN node n ON n.node_id = a.node_id"
            # Whole GPUs only: MIG slices of different sizes are not peers, and their board-wide power and
            # clocks are shared with other jobs' slices.
            " WHERE a.ended_at IS NULL AND a.mig_id IS NULL GROUP BY a.job_id"
        )
        everywhere = {job_id: tuple(rest) for job_id, *rest in await cur.fetchall()}
        running = everywhere if owns is None else {job: rest for job, rest in everywhere.items() if owns(job)}
        for job_id in set(self.jobs) & set(everywhere) - set(running):
            # Its shard went to another collector: the job goes on there, replayed; it is not finished.
            del self.jobs[job_id]
        cur = await conn.execute(
            "SELECT node_id, array_agg(port_id ORDER BY device, port) FROM ib_port WHERE node_id = ANY(%s)"
            " GROUP BY node_id",
            (sorted({node for _, nodes, _, _ in running.values() for node in nodes}),),
        )
        ports_of: dict[int, list[int]] = dict(await cur.fetchall())
        for job_id in set(self.jobs) - set(running):
            await self._finish(conn, job_id, end)
        await self._end_orphans(conn, set(everywhere), end, owns)
        for job_id, (gpus, nodes, started, cluster) in running.items():
            node_ids = list(dict.fromkeys(nodes))
            port_ids = [port for node in node_ids for port in ports_of.get(node, [])]
            known = self.jobs.get(job_id)
            if known is not None and (known.gpu_ids, known.port_ids) == (gpus, port_ids):
                continue
            if known is not None:  # the job grew or shrank, or a port appeared: its baselines no longer apply
                await self._finish(conn, job_id, end)
            position = {node: n for n, node in enumerate(node_ids)}
            detector = self._detectors.add(
                [position[node] for node in nodes],
                [position[node] for node in node_ids for _ in ports_of.get(node, [])],
            )
            cursor = _bucket(max(started, end - REPLAY))
            self.jobs[job_id] = _Job(cluster, gpus, node_ids, port_ids, detector, cursor)

    async def _complete(self, conn: AsyncConnection[Any], now: datetime, gpu_ids: list[int]) -> dict[str, datetime]:
        """Per job, the end of its complete buckets, over its GPUs that reported in the last SILENT (a job
        none of whose GPUs report moves on regardless). A GPU's bucket is complete once it has a sample
        in a later one, or once its next sample, at its usual spacing, would fall in a later one: a GPU
        sampled every 5 s completes its bucket with its one sample, so a declaration is not held back
        by a whole push interval waiting for the next."""
        cur = await conn.execute(
            "SELECT gpu_id, max(ts), extract(epoch FROM max(ts) - min(ts)) / nullif(count(*) - 1, 0)"
            " FROM gpu_sample WHERE ts >= %s AND ts <= %s AND gpu_id = ANY(%s) GROUP BY gpu_id",
            (now - SILENT, now, gpu_ids),
        )
        done: dict[int, datetime] = {gpu: _done(latest, spacing) for gpu, latest, spacing in await cur.fetchall()}
        complete = {}
        for job_id, job in self.jobs.items():
            reported = [done[g] for g in job.gpu_ids if g in done]
            complete[job_id] = max(job.cursor, min(reported) if reported else _bucket(now - SILENT))
        return complete

    async def _samples(
        self, conn: AsyncConnection[Any], start: datetime, end: datetime, gpu_ids: list[int]
    ) -> tuple[_Grid, _Grid]:
        """The GPUs' and the ports' samples from `start` to `end`, per 5 s bucket, as arrays once per cycle
        (so each job takes its slice), by the columns' names."""
        port_ids = sorted({p for job in self.jobs.values() for p in job.port_ids})
        params = {"bucket": SAMPLE, "origin": EPOCH, "start": start, "end": end, "gpus": gpu_ids, "ports": port_ids}
        cur = await conn.execute(
            # Tensor activity needs profiling counters (GPM on Hopper and later); SM activity stands in.
            "SELECT gpu_id, date_bin(%(bucket)s, ts, %(origin)s) AS bucket,"
            " avg(tensor_active_pct)::float8 AS tensor_active_pct, avg(util_pct)::float8 AS util_pct,"
            " avg(sm_clock_mhz)::float8 AS sm_clock_mhz, bit_or(clock_event_reasons)::float8 AS clock_event_reasons,"
            " avg(sm_active_pct)::float8 AS sm_active_pct, avg(power_w)::float8 AS power_w,"
            # NVLink errors of every kind, as one counter (NULL on GPUs that report none)
            " max(CASE WHEN coalesce(nvlink_replay_errors, nvlink_recovery_errors, nvlink_crc_errors) IS NOT NULL"
            "  THEN coalesce(nvlink_replay_errors, 0) + coalesce(nvlink_recovery_errors, 0)"
            "   + coalesce(nvlink_crc_errors, 0) END)::float8 AS nvlink_errors"
            " FROM gpu_sample WHERE ts >= %(start)s AND ts < %(end)s AND gpu_id = ANY(%(gpus)s) GROUP BY 1, 2",
            params,
        )
        gpus = await _Grid.read(cur, "gpu_id", start, end)
        # Per port, transmit waits and bytes per second from consecutive counter readings (a reading
        # lower than the one before is a counter reset: no rate for that interval), and the link rate.
        cur = await conn.execute(
            "SELECT port_id, date_bin(%(bucket)s, ts, %(origin)s) AS bucket,"
            " (sum(CASE WHEN d_wait >= 0 THEN d_wait END) / nullif(sum(CASE WHEN d_wait >= 0 THEN dt END), 0))::float8"
            "  AS xmit_wait_per_s,"
            " (sum(CASE WHEN d_sent >= 0 THEN d_sent END) / nullif(sum(CASE WHEN d_sent >= 0 THEN dt END), 0))::float8"
            "  AS xmit_bytes_per_s,"
            " min(rate_gbps)::float8 AS rate_gbps FROM ("
            # float8: counters near the int64 bound must not overflow the difference
            "  SELECT port_id, ts, rate_gbps, xmit_wait::float8 - lag(xmit_wait::float8) OVER w AS d_wait,"
            "   xmit_bytes::float8 - lag(xmit_bytes::float8) OVER w AS d_sent,"
            "   extract(epoch FROM ts - lag(ts) OVER w) AS dt"
            "  FROM ib_port_sample WHERE ts >= %(start)s - interval '1 minute' AND ts < %(end)s"
            "  AND port_id = ANY(%(ports)s) WINDOW w AS (PARTITION BY port_id ORDER BY ts)) AS s"
            " WHERE ts >= %(start)s GROUP BY 1, 2",
            params,
        )
        return gpus, await _Grid.read(cur, "port_id", start, end)

    def _feed(self, gpus: _Grid, ports: _Grid, complete: Mapping[str, datetime]) -> None:
        """Each job's complete buckets since its cursor, to its detector: the jobs of one layout together,
        bucket by bucket (stragglers/batch.py), so the cycle's cost is numpy's per bucket and layout, not
        per job."""
        self._detectors.keep(job.detector for job in self.jobs.values())  # however a job stopped being followed
        fed: dict[int, list[tuple[_Job, datetime]]] = {}
        for job_id, job in self.jobs.items():
            if complete[job_id] > job.cursor:
                fed.setdefault(id(job.detector.batch), []).append((job, complete[job_id]))
        for jobs in fed.values():
            # A few thousand jobs at a time: a replay of 25 minutes holds each job's buckets in arrays.
            for first in range(0, len(jobs), JOBS_PER_PASS):
                self._feed_batch(jobs[first : first + JOBS_PER_PASS], gpus, ports)

    def _feed_batch(self, fed: list[tuple[_Job, datetime]], gpus: _Grid, ports: _Grid) -> None:
        """Jobs of one layout (one batch), each to the end of its complete buckets."""
        jobs = [job for job, _ in fed]
        start, end = min(job.cursor for job in jobs), max(until for _, until in fed)
        buckets = np.arange(round((end - start) / SAMPLE))
        first = np.array([round((job.cursor - start) / SAMPLE) for job in jobs])
        until = np.array([round((done - start) / SAMPLE) for _, done in fed])
        window = (buckets >= first[:, None]) & (buckets < until[:, None])  # (job, bucket): the job's to feed
        gpu = gpus.take_rows([job.gpu_ids for job in jobs], start, end)
        port = ports.take_rows([job.port_ids for job in jobs], start, end)
        # Tensor activity is the work done; SM activity how busy the GPU was, and the work's stand-in on
        # GPUs without profiling counters for tensor cores (decided per job over the buckets it is fed).
        tensor, sm, inside = gpu["tensor_active_pct"], gpu["sm_active_pct"], window[:, None, :]
        has_tensor = (np.isfinite(tensor) & inside).any(axis=(1, 2)) | ~(np.isfinite(sm) & inside).any(axis=(1, 2))
        work = np.where(has_tensor[:, None, None], tensor, sm)
        sm_active = np.where(has_tensor[:, None, None], sm, np.nan)  # NaN: what a job without it reads
        # A bucket's time to the detector is its end: the time of the last sample in it, as a sample's
        # own time is the end of the interval it covers.
        times = start.timestamp() + (buckets + 1) * SAMPLE.total_seconds()
        _follow_traffic(jobs, times, window, port["xmit_bytes_per_s"])
        nvlink = self._nvlink_rates(jobs, np.where(inside, gpu["nvlink_errors"], np.nan))
        batch: DetectorBatch = jobs[0].detector.batch
        rows = np.array([job.detector.row for job in jobs])
        job_of = {job.detector.row: job for job in jobs}
        for step in buckets:
            live = window[:, step]
            if not live.any():
                continue
            readings = ReadingRows(
                float(times[step]),
                work=work[live, :, step],
                util_pct=gpu["util_pct"][live, :, step],
                sm_clock_mhz=gpu["sm_clock_mhz"][live, :, step],
                clock_event_reasons=gpu["clock_event_reasons"][live, :, step],
                sm_active_pct=sm_active[live, :, step],
                power_w=gpu["power_w"][live, :, step],
                nvlink_errors_per_s=nvlink[live, :, step],
                xmit_wait_per_s=port["xmit_wait_per_s"][live, :, step],
                link_gbps=port["rate_gbps"][live, :, step],
                xmit_bytes_per_s=port["xmit_bytes_per_s"][live, :, step],
            )
            for row, events in batch.update(rows[live], readings).items():
                job_of[row].follow(events)
        for job, done in fed:
            job.cursor = done

    def _nvlink_rates(self, jobs: list[_Job], counters: np.ndarray) -> np.ndarray:
        """NVLink errors per second per job, GPU and bucket, from the counters at each bucket (NaN outside the
        job's buckets to feed) and the last one fed before (a counter lower than the one before was reset:
        no rate)."""
        gpu_ids = [g for job in jobs for g in job.gpu_ids]
        before = np.array([self._nvlink_errors.get(g, np.nan) for g in gpu_ids]).reshape(counters.shape[:2])
        # Carry the last reading over buckets a GPU missed, so a dropped sample loses no errors.
        filled = np.concatenate([before[..., None], counters], axis=2)
        for step in range(1, filled.shape[2]):
            filled[..., step] = np.where(np.isfinite(filled[..., step]), filled[..., step], filled[..., step - 1])
        rates = np.diff(filled, axis=2) / SAMPLE.total_seconds()
        rates[rates < 0] = np.nan
        for g, last in zip(gpu_ids, filled[..., -1].ravel().tolist(), strict=True):
            if math.isfinite(last):
                self._nvlink_errors[g] = last
        return rates

    async def _store(self, conn: AsyncConnection[Any], job_id: str, job: _Job) -> None:
        """A row for each straggler declared since the last store; the figures of those that changed."""
        for finding in job.findings.values():
            straggler = finding.straggler
            if finding.row_id is None:
                finding.row_id = await self._insert(conn, job_id, job, finding)
                log.warning(
                    "straggler in job %s: %s, %s, job %.0f%% slower",
                    job_id, await _culprit(conn, job, finding), straggler.cause, 100 * straggler.slowdown,
                )  # fmt: skip
            elif finding.changed:
                await conn.execute(
                    "UPDATE straggler SET slowdown = %s, ended_at = %s, aggressor_job = coalesce(%s, aggressor_job)"
                    " WHERE straggler_id = %s",
                    (straggler.slowdown, _at(straggler.ended_s), finding.aggressor, finding.row_id),
                )
            finding.changed = False
        # Ended ones are final in the table: forget them.
        job.findings = {key: f for key, f in job.findings.items() if f.straggler.ended_s is None}

    async def _store_models(self, conn: AsyncConnection[Any], now: datetime) -> None:
        """How each job is judged, for the jobs pages: written when it changes, and each minute for its
        measure; in one statement batch (10,000 jobs refresh in the same cycle, a minute apart)."""
        due = [
            (job_id, job, job.detector.model)
            for job_id, job in self.jobs.items()
            if job.model_stored is None
            or job.model_stored[0] != job.detector.model
            or now - job.model_stored[1] >= MODEL_REFRESH
        ]
        if not due:
            return
        rows = []
        for job_id, job, model in due:
            wander = job.detector.wander
            rows.append((job.cluster, job_id, model, wander if math.isfinite(wander) else None, now))
        async with conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO straggler_job_model (cluster, job_id, model, wander, updated_at)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (cluster, job_id) DO UPDATE"
                " SET model = excluded.model, wander = excluded.wander, updated_at = excluded.updated_at",
                rows,
            )
        for _, job, model in due:
            job.model_stored = (model, now)

    def _name_aggressors(self) -> None:
        """A job slowed by the fabric while another job on some of its nodes sends much more than it did
        before: that job's traffic is named (a shared node's NIC, and the switch behind it, carry both).
        Without a shared node nothing here knows which switch is whose, so none is named."""
        for job_id, job in self.jobs.items():
            active = job.active
            if active is None or active.straggler.cause != "fabric" or active.aggressor is not None:
                continue
            mine = set(job.node_ids)
            rises = {
                other_id: _traffic_rise(other, active.straggler.started_s)
                for other_id, other in self.jobs.items()
                if other_id != job_id and mine & set(other.node_ids)
            }
            loudest = max(
                rises, key=lambda other_id: rises[other_id] if math.isfinite(rises[other_id]) else -1, default=None
            )
            if loudest is not None and rises[loudest] >= AGGRESSOR_RISE:
                active.aggressor, active.changed = loudest, True
                active.aggressor_evidence["aggressor_traffic_rise"] = rises[loudest]

    async def _insert(self, conn: AsyncConnection[Any], job_id: str, job: _Job, finding: _Finding) -> int:
        straggler = finding.straggler
        node_id = _node_id(job, straggler)
        gpu_id = None
        if straggler.gpu is not None:
            ranks = [r for r, n in enumerate(job.detector.node_of) if n == straggler.node]
            gpu_id = job.gpu_ids[ranks[straggler.gpu]]
        # A watch that took over (a restart, another replica) replays the job's history and finds again
        # what its predecessor stored: adopt that row rather than store the straggler twice.
        cur = await conn.execute(
            "SELECT straggler_id FROM straggler WHERE job_id = %s AND node_id IS NOT DISTINCT FROM %s"
            " AND gpu_id IS NOT DISTINCT FROM %s"
            " AND port_id IS NOT DISTINCT FROM %s AND cause = %s"
            " AND (ended_at IS NULL OR ended_at >= %s - interval '1 minute') ORDER BY started_at DESC LIMIT 1",
            (job_id, node_id, gpu_id, _port_id(job, straggler), straggler.cause, _at(straggler.started_s)),
        )
        if found := await cur.fetchone():
            await conn.execute(
                # The aggressor too: a predecessor may have stored the row before it was named.
                "UPDATE straggler SET slowdown = %s, ended_at = %s, aggressor_job = coalesce(%s, aggressor_job)"
                " WHERE straggler_id = %s",
                (straggler.slowdown, _at(straggler.ended_s), finding.aggressor, found[0]),
            )
            return int(found[0])
        cur = await conn.execute(
            "INSERT INTO straggler (job_id, cluster, node_id, gpu_id, port_id, cause, slowdown, evidence, started_at,"
            " declared_at, ended_at, aggressor_job) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " RETURNING straggler_id",
            (
                job_id,
                job.cluster,
                node_id,
                gpu_id,
                _port_id(job, straggler),
                straggler.cause,
                straggler.slowdown,
                json.dumps({k: v for k, v in finding.evidence.items() if math.isfinite(v)}),  # JSON has no NaN
                _at(straggler.started_s),
                _at(straggler.declared_s),
                _at(straggler.ended_s),
                finding.aggressor,
            ),
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])

    def forget(self) -> None:
        """Drop every job (a new shard lease: what this watch knew may predate another's writes); each is
        replayed at the next cycle and adopts its stored rows."""
        self.jobs.clear()

    async def _end_orphans(
        self, conn: AsyncConnection[Any], running: set[str], end: datetime, owns: Callable[[str], bool] | None
    ) -> None:
        """End the open stragglers of this watch's jobs that ended while no watch followed them (their
        shard moving, or their watch gone), at the job's end."""
        cur = await conn.execute("SELECT DISTINCT job_id FROM straggler WHERE ended_at IS NULL")
        for (job_id,) in await cur.fetchall():
            if job_id in running or job_id in self.jobs or (owns is not None and not owns(job_id)):
                continue
            await conn.execute(
                "UPDATE straggler SET ended_at = coalesce("
                " (SELECT max(ended_at) FROM job_allocation WHERE job_id = %s), %s)"
                " WHERE job_id = %s AND ended_at IS NULL",
                (job_id, end, job_id),
            )

    async def _finish(self, conn: AsyncConnection[Any], job_id: str, end: datetime) -> None:
        """The job ended (or changed shape): an active straggler ends with it."""
        job = self.jobs.pop(job_id)
        active = job.active
        if active is not None and active.row_id is not None:
            await conn.execute("UPDATE straggler SET ended_at = %s WHERE straggler_id = %s", (end, active.row_id))


class _Grid:
    """Rows of one id, one 5 s bucket and values, as one array (id, bucket) per value column from `start` to
    `end`, named as the query names its columns; NaN for what is missing."""

    def __init__(
        self, columns: list[str], rows: list[tuple[Any, ...]], key: str, start: datetime, end: datetime
    ) -> None:
        self.start = start
        key_at, bucket_at = columns.index(key), columns.index("bucket")
        value_at = [i for i in range(len(columns)) if i not in (key_at, bucket_at)]
        self.names = [columns[i] for i in value_at]
        # Column by column, not row by row: a cycle reads a row per GPU and per port of the fleet.
        by_column: list[tuple[Any, ...]] = list(zip(*rows, strict=True)) if rows else [()] * len(columns)
        keys, buckets = by_column[key_at], by_column[bucket_at]
        self.row_of = {k: i for i, k in enumerate(dict.fromkeys(keys))}
        # One row more than there are ids: the row of an id without samples, NaN throughout.
        self.data = np.full((len(value_at), len(self.row_of) + 1, int((end - start) / SAMPLE)), np.nan)
        if not rows:
            return
        step_of = {bucket: round((bucket - start) / SAMPLE) for bucket in set(buckets)}
        ids = np.fromiter(map(self.row_of.__getitem__, keys), np.intp, len(rows))
        steps = np.fromiter(map(step_of.__getitem__, buckets), np.intp, len(rows))
        values = np.array([by_column[i] for i in value_at], dtype=float)  # None reads NaN
        kept = (steps >= 0) & (steps < self.data.shape[2])
        self.data[:, ids[kept], steps[kept]] = values[:, kept]

    @classmethod
    async def read(cls, cur: AsyncCursor[Any], key: str, start: datetime, end: datetime) -> _Grid:
        """The rows of the query `cur` ran, whose columns name `key`, "bucket" and the values."""
        assert cur.description is not None
        return cls([column.name for column in cur.description], await cur.fetchall(), key, start, end)

    def take_rows(self, keys: list[list[int]], start: datetime, end: datetime) -> Mapping[str, np.ndarray]:
        """Per value column, (job, id, bucket): each job's rows of its `keys` (as many for each job, in that
        order) from `start` to `end`."""
        rows = np.array([[self.row_of.get(key, -1) for key in job] for job in keys], dtype=np.intp)
        first = round((start - self.start) / SAMPLE)
        block = self.data[:, rows, first : first + round((end - start) / SAMPLE)]
        return dict(zip(self.names, block, strict=True))


def _follow_traffic(jobs: list[_Job], times: np.ndarray, window: np.ndarray, sent: np.ndarray) -> None:
    """Each job's mean bytes per second per port (`sent`: job, port, bucket), bucket by bucket over its
    `window`, into its history."""
    by_bucket = np.ascontiguousarray(sent.transpose(0, 2, 1))  # each bucket's ports side by side, as one job's
    seen = np.isfinite(by_bucket).any(axis=2) & window
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a bucket without traffic: NaN, not kept
        means = np.nanmean(by_bucket, axis=2)
    for job, kept, mean in zip(jobs, seen, means, strict=True):
        job.sent.extend(zip(times[kept].tolist(), mean[kept].tolist(), strict=True))


def _traffic_rise(job: _Job, since_s: float) -> float:
    """How much more the job sent per second since `since_s` than in the ten minutes before (NaN: unknown)."""
    before = [v for t, v in job.sent if since_s - 600 <= t < since_s]
    after = [v for t, v in job.sent if t >= since_s]
    if not before or not after or not sum(before) > 0:
        return math.nan
    return (sum(after) / len(after)) / (sum(before) / len(before)) - 1


def _node_id(job: _Job, straggler: Straggler) -> int | None:
    return None if straggler.node < 0 else job.node_ids[straggler.node]


def _port_id(job: _Job, straggler: Straggler) -> int | None:
    return None if straggler.port is None else job.port_ids[straggler.port]


async def _culprit(conn: AsyncConnection[Any], job: _Job, finding: _Finding) -> str:
    """Where, in the words the pages use (stragglers/reads.py culprit_words). Read once per declaration,
    so never in the cycle's hot path."""
    straggler = finding.straggler
    node_id = _node_id(job, straggler)
    if node_id is None:
        return culprit_words(None, None, None, None, finding.aggressor)
    cur = await conn.execute(
        "SELECT n.name, p.device, p.port FROM node n LEFT JOIN ib_port p ON p.port_id = %s WHERE n.node_id = %s",
        (_port_id(job, straggler), node_id),
    )
    row = await cur.fetchone()
    name, device, port = row if row else (f"node id {node_id}", None, None)
    return culprit_words(str(name), straggler.gpu, device, port, None)


def _done(latest: datetime, spacing: float | None) -> datetime:
    """The end of a GPU's complete buckets: past the bucket of its latest sample where the next one, at
    its usual spacing less a margin for timers' jitter (a fifth of it, half a second at most), falls in
    a later bucket."""
    bucket = _bucket(latest)
    early = None if spacing is None else float(spacing) - min(0.2 * float(spacing), 0.5)
    if early is not None and latest + timedelta(seconds=early) >= bucket + SAMPLE:
        return bucket + SAMPLE
    return bucket


def _bucket(at: datetime) -> datetime:
    seconds = SAMPLE.total_seconds()
    return EPOCH + timedelta(seconds=int(at.timestamp() // seconds * seconds))


def _at(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)
