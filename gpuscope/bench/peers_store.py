"""gpuscope's side of `gpuscope bench peers`: the telemetry loaded into its store as ingest and maintenance
leave it (samples in day partitions, minute and hour rollups, rack power, job allocations), and the five
questions asked of a real collector over its read API, each answer checked against the telemetry."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import numpy as np
import psycopg

from gpuscope.bench.prometheus_answers import window_means
from gpuscope.bench.prometheus_series import exposed
from gpuscope.bench.telemetry import METRICS, GpuId, Telemetry
from gpuscope.bench.timing import p95, timed
from gpuscope.collector.store import partitions, rollups
from gpuscope.collector.store.copy_binary import CopyColumn, encode

CHUNK_ROWS = 200_000
STORED_TYPE = "float4"  # every one of METRICS is a real column in gpu_sample


@dataclass(frozen=True)
class Answer:
    """One question's latencies (ms, over HTTP with the JSON decoded) and whether the answer was right."""

    times_ms: list[float]
    correct: bool
    detail: str

    @property
    def p50(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def p95(self) -> float:
        return p95(self.times_ms)


def load(dsn: str, telemetry: Telemetry, positions: Sequence[int] | None = None) -> int:
    """Load the samples and allocations of the GPUs at `positions` (all of them by default; `bench
    federation` gives each cluster database its share), then roll up as maintenance would; returns the
    rows loaded. GPUs are inserted in position order, so their ids sort as their positions do."""
    chosen = np.arange(len(telemetry.gpus)) if positions is None else np.asarray(positions, dtype=np.int64)
    with psycopg.connect(dsn) as conn:
        gpu_ids = _inventory(conn, [telemetry.gpus[p] for p in chosen])
        conn.commit()
        asyncio.run(make_partitions(dsn, telemetry))
        per_chunk = max(1, CHUNK_ROWS // len(chosen))
        names = ", ".join(["ts", "gpu_id", "up", *METRICS])
        for lo in range(0, telemetry.steps, per_chunk):
            hi = min(lo + per_chunk, telemetry.steps)
            block = telemetry.block(lo, hi)
            rows = (hi - lo) * len(chosen)
            columns = [
                CopyColumn("timestamptz", np.repeat(telemetry.stamps(lo, hi), len(chosen))),
                CopyColumn("int4", np.tile(gpu_ids, hi - lo)),
                CopyColumn("bool", np.ones(rows, dtype=bool)),
            ] + [CopyColumn(STORED_TYPE, block[key][:, chosen].reshape(-1)) for key in METRICS]
            with conn.cursor().copy(f"COPY gpu_sample ({names}) FROM STDIN (FORMAT BINARY)") as copy:
                copy.write(encode(columns))
            conn.commit()
        _allocations(conn, telemetry, dict(zip(chosen.tolist(), gpu_ids.tolist(), strict=True)))
        conn.execute(
            "INSERT INTO rollup_dirty_minute SELECT generate_series(date_bin('1 minute', %s, 'epoch'), %s,"
            " interval '1 minute') ON CONFLICT DO NOTHING",
            (at(telemetry.start), at(telemetry.end)),
        )
        conn.commit()
    asyncio.run(roll_up_all(dsn))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return telemetry.steps * len(chosen)


def database_bytes(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    assert row is not None
    return int(row[0])


def _inventory(conn: psycopg.Connection[Any], gpus: list[GpuId]) -> np.ndarray:
    """Nodes, then GPUs, in position order; each GPU's gpu_id, by position."""
    nodes = list(dict.fromkeys((g.cluster, g.node, g.rack) for g in gpus))
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO node (cluster, name, rack) VALUES (%s, %s, %s)", nodes)
    node_ids = {(c, n): i for c, n, i in conn.execute("SELECT cluster, name, node_id FROM node").fetchall()}
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO gpu (node_id, gpu_index, uuid, model, pci_bus_id) VALUES (%s, %s, %s, 'H100', '-')",
            [(node_ids[(g.cluster, g.node)], g.index, g.uuid) for g in gpus],
        )
    by_uuid = dict(conn.execute("SELECT uuid, gpu_id FROM gpu").fetchall())
    return np.array([by_uuid[g.uuid] for g in gpus], dtype=np.int64)


async def make_partitions(dsn: str, telemetry: Telemetry) -> None:
    """The sample partitions of the telemetry's days, and today's."""
    await partitions_of_days(dsn, telemetry.start, telemetry.end, time.time())


async def partitions_of_days(dsn: str, *stamps: float) -> None:
    """The sample partitions of the days these Unix times fall on (spans between them under a day long
    have no day of their own in between)."""
    days = {partitions.day_of(float(t)) for t in stamps}
    async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
        await partitions.ensure(conn, days)


def _allocations(conn: psycopg.Connection[Any], telemetry: Telemetry, gpu_id_of: Mapping[int, int]) -> None:
    """The jobs' allocations of the GPUs loaded here, by position (a job over two cluster databases is
    in both)."""
    node_of = dict(conn.execute("SELECT gpu_id, node_id FROM gpu").fetchall())
    rows = []
    for job in telemetry.jobs:
        last = job.end_step >= telemetry.steps  # still running at the end of the day
        ended = None if last else at(telemetry.start + job.end_step * telemetry.step_s)
        first_seen = at(telemetry.start + job.first_step * telemetry.step_s)
        last_seen = at(telemetry.start + (job.end_step - 1) * telemetry.step_s)
        for position in job.gpus:
            if position in gpu_id_of:
                gpu_id = gpu_id_of[position]
                rows.append((job.job_id, job.user, node_of[gpu_id], gpu_id, first_seen, last_seen, ended))
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO job_allocation (job_id, username, node_id, gpu_id, started_at, last_seen, ended_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            rows,
        )
    conn.commit()


async def roll_up_all(dsn: str) -> None:
    """Every minute and hour of what was loaded rolled up, as maintenance would have."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while await rollups.roll_up(conn, datetime.now(UTC) + timedelta(hours=1)):
            pass


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


# ---- the questions, over HTTP ---------------------------------------------------------------------------


class Questions:
    """The five questions asked of a collector at `url`, each checked against the telemetry."""

    def __init__(self, url: str, telemetry: Telemetry, runs: int) -> None:
        self.client = httpx.Client(base_url=url, timeout=120)
        self.telemetry = telemetry
        self.runs = runs

    def get(self, path: str, **params: Any) -> Any:
        response = self.client.get(f"/api/v1/{path}", params=params)
        response.raise_for_status()
        return response.json()

    def heatmap(self, hours: float = 6, bucket_s: int = 60) -> Answer:
        t = self.telemetry
        end = t.end + t.step_s  # the range covers the last sample
        start = end - hours * 3600
        times, answer = timed(
            lambda: self.get("heatmap", metric="util_pct", start=_iso(start), end=_iso(end), bucket_seconds=bucket_s),
            self.runs,
        )
        grid = np.array(answer["values"], dtype=np.float64)
        stamps = [datetime.fromisoformat(s).timestamp() for s in answer["times"]]
        # One cell checked in full: the last whole minute of the first GPU shown, against the telemetry.
        gpu = [g.uuid for g in t.gpus].index(answer["gpus"][0]["uuid"])
        minute = stamps[-2]
        lo = int((minute - t.start) // t.step_s)
        expected = t.block(lo, lo + bucket_s // t.step_s)["util_pct"][:, gpu].mean()
        correct = grid.shape == (len(t.gpus), len(stamps)) and abs(grid[0, -2] - expected) < 1e-3
        return Answer(times, correct, f"{grid.shape[0]} GPUs x {grid.shape[1]} minutes")

    def rack_power(self, bucket_s: int) -> Answer:
        t = self.telemetry
        end = t.end + t.step_s
        start = t.start
        times, answer = timed(
            lambda: self.get("rack-power", start=_iso(start), end=_iso(end), bucket_seconds=bucket_s), self.runs
        )
        watts = np.array(answer["watts"], dtype=np.float64)
        stamps = [datetime.fromisoformat(s).timestamp() for s in answer["times"]]
        rack = answer["racks"][0]  # "cluster/rack"
        members = [i for i, g in enumerate(t.gpus) if f"{g.cluster}/{g.rack}" == rack]
        middle = len(stamps) // 2
        lo = int((stamps[middle] - t.start) // t.step_s)
        expected = t.block(lo, lo + bucket_s // t.step_s)["power_w"][:, members].sum(axis=1).mean()
        got = watts[0, middle]
        correct = abs(got - expected) <= 1e-4 * expected
        return Answer(times, correct, f"{len(answer['racks'])} racks x {len(stamps)} buckets of {bucket_s} s")

    def job(self, job_id: str, bucket_s: int) -> Answer:
        t = self.telemetry
        span = next(j for j in t.jobs if j.job_id == job_id)
        start = t.start + span.first_step * t.step_s
        end = t.start + span.end_step * t.step_s
        params = {"job": job_id, "metric": ["util_pct", "power_w"], "start": _iso(start), "end": _iso(end)}
        times, answer = timed(lambda: self.get("series", **params, bucket_seconds=bucket_s), self.runs)
        shown = {g["uuid"] for g in answer["gpus"]}
        correct = shown == {t.gpus[p].uuid for p in span.gpus} and set(answer["values"]) == {"util_pct", "power_w"}
        return Answer(times, correct, f"{len(shown)} GPUs x {len(answer['times'])} buckets of {bucket_s} s")

    def hottest(self) -> Answer:
        t = self.telemetry
        # as of the last sample, as Prometheus's instant query is asked (loading took minutes: "now" has moved)
        at = _iso(t.end + 1)
        times, answer = timed(lambda: self.get("top", metric="temp_c", limit=10, at=at), self.runs)
        newest = t.block(t.steps - 1, t.steps)["temp_c"][0]
        expected = sorted(newest.tolist(), reverse=True)[:10]
        correct = [row["value"] for row in answer] == expected
        return Answer(times, correct, f"{len(answer)} GPUs, {answer[0]['value'] if answer else '-'} C the hottest")

    def one_gpu(self, gpu: int) -> Answer:
        """One GPU's utilisation over the day at 1-minute buckets (a node or GPU page), every minute
        checked against the telemetry's mean of that GPU's samples in it."""
        t = self.telemetry
        end = t.end + t.step_s
        params = {"uuid": t.gpus[gpu].uuid, "metric": "util_pct", "start": _iso(t.start), "end": _iso(end)}
        times, answer = timed(lambda: self.get("series", **params, bucket_seconds=60), self.runs)
        stamps = np.array([datetime.fromisoformat(s).timestamp() for s in answer["times"]])
        got = np.array([np.nan if v is None else v for v in answer["values"]["util_pct"][0]], dtype=np.float64)
        windows = np.column_stack([stamps, stamps + 60 - 1e-3])  # [b, b + 60): the bucket's samples
        expected = window_means(t, "util_pct", windows, [gpu])[:, 0] / exposed("util_pct").scale
        correct = (
            [g["uuid"] for g in answer["gpus"]] == [t.gpus[gpu].uuid]
            and bool(np.isfinite(got).any())
            and np.array_equal(np.isnan(got), np.isnan(expected))
            and np.allclose(got, expected, rtol=1e-9, atol=1e-9, equal_nan=True)
        )
        return Answer(times, correct, f"1 GPU x {len(stamps)} minutes")

    def close(self) -> None:
        self.client.close()


def _iso(seconds: float) -> str:
    return at(seconds).isoformat()
