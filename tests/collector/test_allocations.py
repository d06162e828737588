"""GPU-to-job allocations: intervals with a start and an end, kept from what exporters report."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import psycopg
import pytest

from gpuscope.collector.store.allocations import STALE_AFTER, expire_stale
from gpuscope.exporter.sim import JobSchedule, SimNodeSource, build_topology
from gpuscope.exporter.snapshot import JobInfo, Snapshot
from gpuscope.exporter.wire import Origin, encode_batch
from tests.collector.helpers import post
from tests.processes import RunningCollector

START = float(int(time.time()) - 120)  # whole seconds: the assertions compare rounded epochs


@pytest.fixture(autouse=True)
def two_minutes_ago() -> None:
    """START two minutes before each test, not before the module was imported: in a long suite a test
    can run many minutes after its module was collected, and its allocations would look stale."""
    global START
    START = float(int(time.time()) - 120)
topology = build_topology(1, 2, 1, cluster="alloc")


def batch(seq: int, jobs_per_second: list[dict[int, JobInfo]], exporter_id: str, offset: int = 0) -> dict:
    source = SimNodeSource(topology[0], JobSchedule(topology, 1), 1)
    snaps = []
    for i, jobs in enumerate(jobs_per_second):
        ts = START + offset + i
        gpus, ports = source.read(ts)
        snaps.append(Snapshot(ts=ts, gpus=gpus, ports=ports, jobs=jobs))
    return encode_batch(Origin("alloc", "rack-00", "node-000", "sim", exporter_id), seq, snaps)


def allocations(dsn: str) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT g.gpu_index, a.job_id, a.username, extract(epoch FROM a.started_at)::int,"
            "       extract(epoch FROM a.last_seen)::int, extract(epoch FROM a.ended_at)::int"
            " FROM job_allocation a JOIN gpu g USING (gpu_id) ORDER BY g.gpu_index, a.started_at"
        ).fetchall()


A, B = JobInfo("100", "alice"), JobInfo("200", "bob")


def test_job_change_closes_one_allocation_and_opens_the_next(collector: RunningCollector) -> None:
    exporter = str(uuid.uuid4())
    first = batch(1, [{0: A, 1: A}] * 3, exporter)
    second = batch(2, [{0: A, 1: A}, {0: B}, {0: B}], exporter, offset=3)
    assert post(collector, first).status_code == 200
    assert post(collector, second).status_code == 200
    t = int(START)
    assert allocations(collector.dsn) == [
        (0, "100", "alice", t, t + 3, t + 4),  # ended at the first sample showing job B
        (0, "200", "bob", t + 4, t + 5, None),
        (1, "100", "alice", t, t + 3, t + 4),  # GPU 1 went idle: the allocation ends
    ]


def test_late_or_repeated_batches_change_nothing(collector: RunningCollector) -> None:
    exporter = str(uuid.uuid4())
    late = batch(1, [{0: A}] * 2, exporter)
    assert post(collector, batch(2, [{0: A}] * 2, exporter, offset=2)).status_code == 200
    before = allocations(collector.dsn)
    assert post(collector, late).status_code == 200  # arrives after its successor
    assert post(collector, late).json()["duplicate"] is True
    assert allocations(collector.dsn) == before


def test_no_attribution_reported_changes_no_allocation(collector: RunningCollector) -> None:
    exporter = str(uuid.uuid4())
    assert post(collector, batch(1, [{0: A}], exporter)).status_code == 200
    plain = batch(2, [{0: A}], exporter, offset=1)
    del plain["jobs"], plain["gpu_samples"]["job"]  # an exporter with --jobs none
    assert post(collector, plain).status_code == 200
    assert [row[5] for row in allocations(collector.dsn)] == [None]


def test_stale_allocation_expires(collector: RunningCollector) -> None:
    assert post(collector, batch(1, [{0: A}], str(uuid.uuid4()))).status_code == 200

    async def expire(now: datetime) -> int:
        async with await psycopg.AsyncConnection.connect(collector.dsn, autocommit=True) as conn:
            return await expire_stale(conn, now)

    assert asyncio.run(expire(datetime.now(UTC))) == 0, "reported two minutes ago: still alive"
    assert asyncio.run(expire(datetime.now(UTC) + STALE_AFTER + timedelta(minutes=1))) == 1
    [(_, _, _, _, last_seen, ended)] = allocations(collector.dsn)
    assert ended == last_seen, "a silent allocation ends when it was last seen"


def test_bad_job_reference_is_rejected(collector: RunningCollector) -> None:
    bad = batch(1, [{0: A}], str(uuid.uuid4()))
    bad["gpu_samples"]["job"][0] = 5
    response = post(collector, bad)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["gpu_samples", "job", 0]
    assert allocations(collector.dsn) == []


def _pods(dsn: str) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT g.gpu_index, a.job_id, a.namespace, a.pod, a.container, a.workload,"
            "       extract(epoch FROM a.started_at)::int, extract(epoch FROM a.ended_at)::int"
            " FROM job_allocation a JOIN gpu g USING (gpu_id) ORDER BY g.gpu_index, a.started_at"
        ).fetchall()


def test_a_pod_replaced_under_the_same_job_starts_an_allocation_of_its_own(collector: RunningCollector) -> None:
    first, second = (JobInfo("ml/llama", None, "ml", f"llama-0-{n}", "trainer", "JobSet/llama") for n in "ab")
    other_container = JobInfo("ml/llama", None, "ml", "llama-0-b", "sidecar", "JobSet/llama")
    exporter = str(uuid.uuid4())
    assert post(collector, batch(1, [{0: first}] * 2 + [{0: second}], exporter)).status_code == 200
    assert post(collector, batch(2, [{0: second}, {0: other_container}], exporter, offset=3)).status_code == 200
    t = int(START)
    assert _pods(collector.dsn) == [
        (0, "ml/llama", "ml", "llama-0-a", "trainer", "JobSet/llama", t, t + 2),
        (0, "ml/llama", "ml", "llama-0-b", "trainer", "JobSet/llama", t + 2, t + 4),  # continued across batches
        (0, "ml/llama", "ml", "llama-0-b", "sidecar", "JobSet/llama", t + 4, None),
    ]


@pytest.mark.parametrize(
    ("field", "value"),
    [("namespace", "n" * 64), ("pod", "p" * 321), ("container", "c\n"), ("workload", ""), ("pod", 7)],
)
def test_bad_kubernetes_fields_are_refused_and_nothing_is_stored(
    collector: RunningCollector, field: str, value: object
) -> None:
    bad = batch(1, [{0: JobInfo("ml/x", None, "ml", "x-0", "c", "Pod/x-0")}], str(uuid.uuid4()))
    bad["jobs"][0][field] = value
    response = post(collector, bad)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["jobs", 0, field]
    assert allocations(collector.dsn) == []


def test_a_slurm_jobs_account_and_partition_are_stored_and_served(collector: RunningCollector) -> None:
    """The prolog's account and partition (deploy/slurm) travel with the job to its allocation, the jobs API
    and the alerting view; a job without them (another scheduler, or none given) has nulls."""
    physics = JobInfo("4711", "ada", account="physics", partition="gpu")
    plain = JobInfo("4712", "bob")
    assert post(collector, batch(1, [{0: physics, 1: plain}] * 2, str(uuid.uuid4()))).status_code == 200
    with psycopg.connect(collector.dsn) as conn:
        stored = conn.execute("SELECT job_id, account, partition FROM job_allocation ORDER BY job_id").fetchall()
        viewed = conn.execute("SELECT job_id, account, partition FROM alerting.job_gpus ORDER BY job_id").fetchall()
    assert stored == viewed == [("4711", "physics", "gpu"), ("4712", None, None)]
    jobs = {j["job_id"]: j for j in httpx.get(f"{collector.url}/api/v1/jobs", timeout=10).json()}
    assert (jobs["4711"]["account"], jobs["4711"]["partition"]) == ("physics", "gpu")
    assert (jobs["4712"]["account"], jobs["4712"]["partition"]) == (None, None)


@pytest.mark.parametrize(("field", "value"), [("account", "a" * 200), ("partition", "p\n"), ("account", 3)])
def test_bad_slurm_fields_are_refused_and_nothing_is_stored(
    collector: RunningCollector, field: str, value: object
) -> None:
    bad = batch(1, [{0: JobInfo("4711", "ada", account="physics", partition="gpu")}], str(uuid.uuid4()))
    bad["jobs"][0][field] = value
    response = post(collector, bad)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["jobs", 0, field]
    assert allocations(collector.dsn) == []
