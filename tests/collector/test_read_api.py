"""The read API over a real collector: data pushed through ingest, rolled up, then read back through
every route, with the numbers checked against what was sent; and each bad request refused clearly."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
import pytest

from gpuscope.collector.store import rollups
from gpuscope.exporter.events import Event
from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, JobInfo, PortIdentity, PortReading, Snapshot
from gpuscope.exporter.wire import Origin, encode_batch
from tests.collector.helpers import post
from tests.processes import RunningCollector

GPUS = [GpuIdentity(i, f"GPU-{i}", "H100", f"00:{i:02x}") for i in range(8)]
PORT = PortIdentity("mlx5_0", 1)
STEPS = 60  # ten minutes of 10 s samples
BYTES_PER_S = 1000.0


@dataclass(frozen=True)
class Loaded:
    collector: RunningCollector
    first_ts: float
    j2_end_ts: float

    def get(self, path: str, **params: Any) -> httpx.Response:
        return httpx.get(f"{self.collector.url}/api/v1/{path}", params=params, timeout=30)


def snapshot(ts: float, step: int) -> Snapshot:
    readings = tuple(
        GpuReading(gpu, True, values={"util_pct": 10.0 * gpu.index, "power_w": 100.0 + gpu.index}) for gpu in GPUS
    )
    jobs = {i: JobInfo("j1", "alice") for i in range(4)}
    if step < STEPS // 2:
        jobs |= {i: JobInfo("j2", "bob") for i in range(4, 8)}
    port = PortReading(PORT, {"xmit_bytes": BYTES_PER_S * ts, "state": 4})
    return Snapshot(ts=ts, gpus=readings, ports=(port,), jobs=jobs)


@pytest.fixture
def loaded(collector: RunningCollector) -> Loaded:
    last = time.time() - 1
    first = last - 10 * (STEPS - 1)
    origin = Origin("c1", "rack-a", "node-000", "sim", str(uuid.uuid4()))
    snaps = [snapshot(first + 10 * i, i) for i in range(STEPS)]
    for seq, start in enumerate(range(0, STEPS, 6), start=1):
        events = [Event(snaps[start].ts, 2, "xid", code=79)] if start == 12 else []
        response = post(collector, encode_batch(origin, seq, snaps[start : start + 6], events))
        assert response.status_code == 200, response.text

    async def roll() -> None:
        async with await psycopg.AsyncConnection.connect(collector.dsn, autocommit=True) as conn:
            await rollups.roll_up(conn)

    asyncio.run(roll())
    return Loaded(collector, first, first + 10 * (STEPS // 2))


def test_heatmap_and_series_return_what_was_sent(loaded: Loaded) -> None:
    heat = loaded.get("heatmap", minutes=15, bucket_seconds=60).json()
    assert [g["gpu"] for g in heat["gpus"]] == list(range(8))
    for i, row in enumerate(heat["values"]):
        assert {round(v, 6) for v in row if v is not None} == {10.0 * i}
    series = loaded.get("series", node="node-000", metric=["util_pct", "power_w"], minutes=15).json()
    # sampled every 10 s: the automatic width is the narrowest that data fills (5 s would leave every other empty)
    assert series["bucket_seconds"] == 15 and len(series["gpus"]) == 8
    assert {v for v in series["values"]["power_w"][7] if v is not None} == {107.0}
    by_job = loaded.get("series", job="j2", metric="util_pct", minutes=15, bucket_seconds=60).json()
    assert [g["uuid"] for g in by_job["gpus"]] == ["GPU-4", "GPU-5", "GPU-6", "GPU-7"]
    one = loaded.get("series", uuid="GPU-3", metric="util_pct", minutes=15).json()
    assert [g["gpu"] for g in one["gpus"]] == [3]


def test_nic_series_gives_counter_rates_and_gauge_means(loaded: Loaded) -> None:
    rates = loaded.get("nics/series", node="node-000", metric="xmit_bytes", minutes=15, bucket_seconds=60).json()
    assert rates["per_second"] is True and rates["ports"][0]["device"] == "mlx5_0"
    values = [v for v in rates["values"][0] if v is not None]
    assert len(values) >= 9 and all(v == pytest.approx(BYTES_PER_S) for v in values)
    state = loaded.get("nics/series", node="node-000", metric="state", minutes=15).json()
    assert state["per_second"] is False and {v for v in state["values"][0] if v is not None} == {4.0}


def test_jobs_with_state_and_efficiency(loaded: Loaded) -> None:
    jobs = {j["job_id"]: j for j in loaded.get("jobs", minutes=30).json()}
    assert jobs.keys() == {"j1", "j2"}
    j1, j2 = jobs["j1"], jobs["j2"]
    assert (j1["state"], j1["user"], j1["gpus"], j1["ended_at"]) == ("running", "alice", 4, None)
    assert (j2["state"], j2["user"], j2["gpus"], j2["nodes"]) == ("finished", "bob", 4, ["node-000"])
    assert j1["usage"]["mean_util_pct"] == pytest.approx(15.0)  # GPUs 0-3 at 0, 10, 20, 30 %
    assert j2["usage"]["mean_util_pct"] == pytest.approx(55.0)
    assert j2["usage"]["mean_power_w"] == pytest.approx(105.5)
    assert j2["gpu_hours"] == pytest.approx(4 * (loaded.j2_end_ts - loaded.first_ts) / 3600, rel=1e-3)
    assert [j["job_id"] for j in loaded.get("jobs", minutes=30, state="running").json()] == ["j1"]
    assert loaded.get("jobs", minutes=30, user="bob").json()[0]["job_id"] == "j2"
    detail = loaded.get("jobs/j2").json()
    assert detail["job"]["job_id"] == "j2"
    assert [(g["gpu"]["gpu"], g["usage"]["mean_util_pct"]) for g in detail["gpus"]] == [
        (4, 40.0),
        (5, 50.0),
        (6, 60.0),
        (7, 70.0),
    ]


def test_events_and_fleet(loaded: Loaded) -> None:
    [event] = loaded.get("events", minutes=30).json()
    assert (event["kind"], event["code"], event["gpu"], event["uuid"], event["node"]) == (
        "xid",
        79,
        2,
        "GPU-2",
        "node-000",
    )
    assert loaded.get("events", minutes=30, kind="gpu_lost").json() == []
    fleet = loaded.get("fleet").json()
    assert fleet == {
        "gpus_known": 8,
        "gpus_reporting": 8,
        "gpus_up": 8,
        "mean_util_pct": pytest.approx(35.0),
        "total_power_w": pytest.approx(828.0),
        "running_jobs": fleet["running_jobs"],
        "nodes_known": 1,
        # j1 holds GPUs 0-3: GPU 0 at 0% is idle in it, GPU 2 had an XID 79 eight minutes ago; j2 ended.
        "gpus_unhealthy": 1,
        "gpus_working": 2,
        "gpus_idle_in_job": 1,
        "gpus_free": 4,
        "mean_sm_active_pct": None,
        "mean_tensor_active_pct": None,
    }
    with psycopg.connect(loaded.collector.dsn) as conn:
        running = conn.execute("SELECT count(DISTINCT job_id) FROM job_allocation WHERE ended_at IS NULL").fetchone()
    assert running == (fleet["running_jobs"],)


def test_top_ranks_gpus_by_their_newest_value(loaded: Loaded) -> None:
    newest = loaded.first_ts + 10 * (STEPS - 1)
    top = loaded.get("top", metric="power_w", limit=3).json()
    assert [(t["gpu"]["gpu"], t["value"]) for t in top] == [(7, 107.0), (6, 106.0), (5, 105.0)]
    assert [datetime.fromisoformat(t["ts"]).timestamp() for t in top] == pytest.approx([newest] * 3)
    coolest = loaded.get("top", metric="util_pct", limit=2, order="asc").json()
    assert [(t["gpu"]["uuid"], t["value"]) for t in coolest] == [("GPU-0", 0.0), ("GPU-1", 10.0)]
    assert loaded.get("top", metric="temp_c").json() == []  # never reported: no value now
    earlier = datetime.fromtimestamp(loaded.first_ts + 10 * 5 + 1, UTC).isoformat()  # as of the 6th sample
    then = loaded.get("top", metric="power_w", limit=1, at=earlier).json()
    assert datetime.fromisoformat(then[0]["ts"]).timestamp() == pytest.approx(loaded.first_ts + 50)
    too_early = datetime.fromtimestamp(loaded.first_ts - 1, UTC).isoformat()
    assert loaded.get("top", metric="power_w", at=too_early).json() == []


@pytest.mark.parametrize(
    ("path", "params", "status", "needle"),
    [
        ("series", {"metric": "util_pct"}, 422, "node, uuid or job"),
        ("series", {"metric": "nope", "node": "node-000"}, 422, "unknown metric"),
        ("series", {"metric": "util_pct", "node": "ghost"}, 404, "no GPU"),
        ("heatmap", {"minutes": 10, "start": "2026-11-20T00:00:00Z"}, 422, "not both"),
        ("heatmap", {"start": "2026-11-20T00:00:00"}, 422, "UTC offset"),
        ("heatmap", {"start": "2026-11-20T00:00:00Z", "end": "2026-11-19T00:00:00Z"}, 422, "after start"),
        ("heatmap", {"minutes": 10000, "bucket_seconds": 1}, 422, "buckets"),
        ("nics/series", {"node": "node-000", "metric": "util_pct"}, 422, "unknown port metric"),
        ("nics/series", {"node": "ghost"}, 404, "no InfiniBand port"),
        ("jobs", {"state": "paused"}, 422, "running"),
        ("jobs/ghost", {}, 404, "no job"),
        ("top", {"metric": "nope"}, 422, "unknown metric"),
        ("top", {"limit": 0}, 422, "greater than or equal to 1"),
        ("top", {"order": "sideways"}, 422, "desc"),
        ("top", {"at": "2026-11-20T00:00:00"}, 422, "UTC offset"),
    ],
)
def test_bad_read_requests_are_refused_clearly(
    loaded: Loaded, path: str, params: dict[str, Any], status: int, needle: str
) -> None:
    response = loaded.get(path, **params)
    assert response.status_code == status, response.text
    assert needle in response.text


def test_openapi_documents_every_read_route(collector: RunningCollector) -> None:
    paths = httpx.get(f"{collector.url}/openapi.json").json()["paths"]
    paths_wanted = ("heatmap", "series", "rack-power", "fleet", "top", "nics/series", "jobs", "jobs/{job_id}", "events")
    for path in (*paths_wanted, "stragglers"):
        assert f"/api/v1/{path}" in paths, path
