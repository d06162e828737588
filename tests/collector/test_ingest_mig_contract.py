"""MIG devices in a batch, written from docs/ingest-format.md ("### MIG devices") alone: the collector
is a black box here, and each test checks one sentence of the contract, in version 1 (JSON) and in
version 2 (binary columns, with `migs` and `mig_samples` as arrays in the JSON header)."""

from __future__ import annotations

import copy
import json
import re
import struct
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psycopg
import pytest

from tests.collector.helpers import NOTHING, post, stored
from tests.conftest import count_rows
from tests.processes import RunningCollector, running_collector

DOC = Path(__file__).resolve().parents[2] / "docs" / "ingest-format.md"
T0 = float(int(time.time()) - 120)  # whole seconds: the assertions compare rounded epochs
UUID0 = "MIG-6c3e2a1f-5b7d-5e2c-8f1a-0b9d7c6e5a43"  # GPU instance 1, 3g.40gb
UUID1 = "MIG-1d2e3f4a-5b6c-5d7e-8f9a-0b1c2d3e4f5a"  # GPU instance 2, 1g.10gb
MIGS = [
    {
        "gpu": 0,
        "gpu_instance_id": 1,
        "compute_instance_id": 0,
        "uuid": UUID0,
        "profile": "3g.40gb",
        "slices": 3,
        "gpu_slices": 7,
    },
    {
        "gpu": 0,
        "gpu_instance_id": 2,
        "compute_instance_id": 0,
        "uuid": UUID1,
        "profile": "1g.10gb",
        "slices": 1,
        "gpu_slices": 7,
    },
]
JOBS = [{"id": "100", "user": "alice"}, {"id": "200", "user": "bob"}, {"id": "300", "user": "carol"}]
VERSIONS = pytest.mark.parametrize("version", [1, 2])


def batch(
    seq: int = 1,
    seconds: int = 2,
    exporter: str | None = None,
    offset: int = 0,
    mig_jobs: list[tuple[int | None, int | None]] | None = None,
    gpu_job: int | None = None,
    with_migs: bool = True,
) -> dict[str, Any]:
    """A node with GPUs 0 and 1 and one port; GPU 0 in MIG mode with MIGS, sampled once a second.
    `mig_jobs`: per second, the job position on MIG device 0 and on MIG device 1 (None: no `job`)."""
    seconds_ts = [T0 + offset + i for i in range(seconds)]
    rows = [(t, g) for t in seconds_ts for g in (0, 1)]
    body: dict[str, Any] = {
        "format": "gpuscope-samples",
        "version": 1,
        "exporter_id": exporter or str(uuid.uuid4()),
        "seq": seq,
        "source": {"cluster": "mig", "rack": "r1", "node": "gpu-01", "backend": "nvml"},
        "gpus": [
            {
                "index": g,
                "uuid": f"GPU-0000000{g}-aaaa-bbbb-cccc-dddddddddddd",
                "model": "NVIDIA H100 80GB HBM3",
                "pci_bus_id": f"00000000:1{g}:00.0",
            }
            for g in (0, 1)
        ],
        "ports": [{"device": "mlx5_0", "port": 1}],
        "jobs": JOBS,
        "gpu_samples": {
            "ts": [t for t, _ in rows],
            "gpu": [g for _, g in rows],
            "up": [True] * len(rows),
            "job": [gpu_job if g == 0 else None for _, g in rows],
            "values": {"util_pct": [None if g == 0 else 50.0 for _, g in rows], "power_w": [300.0] * len(rows)},
        },
        "port_samples": {
            "ts": seconds_ts,
            "port": [0] * seconds,
            "values": {"xmit_bytes": [1000 * i for i in range(seconds)]},
        },
    }
    if with_migs:
        mig_rows = [(s, t, m) for s, t in enumerate(seconds_ts) for m in (0, 1)]
        body["migs"] = copy.deepcopy(MIGS)
        body["mig_samples"] = {
            "ts": [t for _, t, _ in mig_rows],
            "mig": [m for _, _, m in mig_rows],
            "values": {  # tensor_active_pct not reported by any row
                "fb_used_bytes": [30064771072 + s if m == 0 else 0 for s, _, m in mig_rows],
                "fb_total_bytes": [42949672960 if m == 0 else 10737418240 for _, _, m in mig_rows],
                "sm_active_pct": [71.5 if m == 0 else None for _, _, m in mig_rows],
            },
        }
        if mig_jobs is not None:
            body["mig_samples"]["job"] = [mig_jobs[s][m] for s, _, m in mig_rows]
    return body


def version2(body: dict[str, Any]) -> bytes:
    """The same batch in the binary layout: gpu and port blocks as columns, everything else in the header."""
    header = copy.deepcopy(body)
    header["version"] = 2
    blocks = b""
    for name, device in (("gpu_samples", "gpu"), ("port_samples", "port")):
        block = body.get(name) or {"ts": [], device: [], "values": {}}
        keys = list(block["values"])
        header[name] = {"rows": len(block["ts"]), "values": keys}
        parts = [np.asarray(block["ts"], "<f8").tobytes()]
        parts += [np.array([np.nan if v is None else v for v in block["values"][k]], "<f8").tobytes() for k in keys]
        if name == "gpu_samples" and "jobs" in body:
            parts.append(np.array([-1 if j is None else j for j in block["job"]], "<i4").tobytes())
        parts.append(np.asarray(block[device], "<u2").tobytes())
        if name == "gpu_samples":
            parts.append(np.asarray(block["up"], "u1").tobytes())
        data = b"".join(parts)
        blocks += data + b"\0" * (-len(data) % 8)
    head = json.dumps(header).encode()
    return b"GPSB" + struct.pack("<I", len(head)) + head + b"\0" * (-(8 + len(head)) % 8) + blocks


def send(collector: RunningCollector, body: dict[str, Any], version: int) -> httpx.Response:
    if version == 1:
        return post(collector, body)
    return post(collector, version2(body), **{"Content-Type": "application/x-gpuscope-samples"})


def query(dsn: str, sql: str) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql).fetchall()


def mig_devices(dsn: str) -> list[tuple]:
    return query(
        dsn,
        "SELECT g.gpu_index, m.gpu_instance_id, m.compute_instance_id, m.uuid, m.profile, m.slices,"
        " m.gpu_slices FROM mig_device m JOIN gpu g USING (gpu_id) ORDER BY m.gpu_instance_id",
    )


def allocations(dsn: str) -> list[tuple]:
    """(gpu index, MIG uuid or None, job, started, last seen, ended, MIG's parent is the allocation's GPU)."""
    return query(
        dsn,
        "SELECT g.gpu_index, m.uuid, a.job_id, extract(epoch FROM a.started_at)::int,"
        " extract(epoch FROM a.last_seen)::int, extract(epoch FROM a.ended_at)::int,"
        " m.gpu_id = a.gpu_id FROM job_allocation a JOIN gpu g USING (gpu_id)"
        " LEFT JOIN mig_device m ON m.mig_id = a.mig_id"
        " ORDER BY g.gpu_index, m.uuid NULLS FIRST, a.started_at",
    )


# 1. Stored, with the answer's mig_rows; a retried batch stores nothing twice.


@VERSIONS
def test_mig_devices_and_samples_are_stored(collector: RunningCollector, version: int) -> None:
    body = batch(seq=5)
    response = send(collector, body, version)
    assert response.status_code == 200, response.text
    assert response.json() == {"duplicate": False, "gpu_rows": 4, "port_rows": 2, "mig_rows": 4, "ignored_fields": []}
    assert mig_devices(collector.dsn) == [(0, 1, 0, UUID0, "3g.40gb", 3, 7), (0, 2, 0, UUID1, "1g.10gb", 1, 7)]
    rows = query(
        collector.dsn,
        "SELECT extract(epoch FROM s.ts)::float8, m.uuid, s.fb_used_bytes, s.fb_total_bytes,"
        " s.sm_active_pct, s.tensor_active_pct FROM mig_sample s JOIN mig_device m USING (mig_id)"
        " ORDER BY s.ts, m.uuid",
    )
    t = T0
    assert [(ts - t, *rest) for ts, *rest in rows] == [
        (0, UUID1, 0, 10737418240, None, None),  # null: not reported; tensor_active_pct: no row reports it
        (0, UUID0, 30064771072, 42949672960, 71.5, None),
        (1, UUID1, 0, 10737418240, None, None),
        (1, UUID0, 30064771073, 42949672960, 71.5, None),
    ]
    again = send(collector, body, version)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert count_rows(collector.dsn, "mig_sample") == 4
    assert count_rows(collector.dsn, "mig_device") == 2
    assert count_rows(collector.dsn, "gpu_sample") == 4


def test_the_documented_mig_example_is_accepted(dsn: str) -> None:
    """The complete example with the MIG section's `migs` and `mig_samples` added, both verbatim."""
    text = DOC.read_text(encoding="utf-8")
    example = re.search(r"^## A complete example\b.*?^```json\n(.*?)^```", text, re.S | re.M)
    mig = re.search(r"^### MIG devices\b.*?^```json\n(.*?)^```", text, re.S | re.M)
    assert example and mig
    body = json.loads(example.group(1)) | json.loads("{" + mig.group(1) + "}")
    days = {"retention_days": 36500, "minute_rollup_days": 36500, "hour_rollup_days": 36500}
    with running_collector(dsn, **days) as collector:  # its timestamps are in the past
        response = post(collector, body)
        assert response.status_code == 200, response.text
        assert response.json()["mig_rows"] == 2 and response.json()["ignored_fields"] == []
    assert [row[3:] for row in mig_devices(dsn)] == [
        (m["uuid"], m["profile"], m["slices"], m["gpu_slices"]) for m in body["migs"]
    ]
    assert query(dsn, "SELECT a.job_id FROM job_allocation a JOIN mig_device m USING (mig_id)") == [("4711",)]


# 2. Each rule broken: 422 naming the member, and nothing stored.


def change(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(body: dict[str, Any]) -> None:
        target = body
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return apply


def with_mig_jobs(body: dict[str, Any]) -> None:
    body["mig_samples"]["job"] = [0, None, 0, 7]  # 7: there are three jobs


def duplicate_row(body: dict[str, Any]) -> None:
    body["mig_samples"]["ts"][2] = body["mig_samples"]["ts"][0]  # rows 0 and 2: MIG device 0 at T0


PREFIX = "prefix"  # the doc names the rule's member but not which of a pair or triple: check the start of loc
BROKEN = [
    ("gpu not listed", change(["migs", 1, "gpu"], 5), ["migs", 1, "gpu"]),
    ("same uuid twice", change(["migs", 1, "uuid"], UUID0), ["migs", 1, "uuid"]),
    ("gpu_instance_id 256", change(["migs", 0, "gpu_instance_id"], 256), ["migs", 0, "gpu_instance_id"]),
    ("compute_instance_id -1", change(["migs", 0, "compute_instance_id"], -1), ["migs", 0, "compute_instance_id"]),
    ("slices 0", change(["migs", 0, "slices"], 0), ["migs", 0, "slices"]),
    ("gpu_slices below slices", change(["migs", 0, "gpu_slices"], 2), ["migs", 0, "gpu_slices"]),
    ("profile of 65", change(["migs", 0, "profile"], "p" * 65), ["migs", 0, "profile"]),
    ("profile empty", change(["migs", 0, "profile"], ""), ["migs", 0, "profile"]),
    ("mig not a position", change(["mig_samples", "mig", 3], 2), ["mig_samples", "mig", 3]),
    ("same mig and ts twice", duplicate_row, (PREFIX, ["mig_samples"])),
    (
        "sm_active_pct 101",
        change(["mig_samples", "values", "sm_active_pct", 2], 101),
        ["mig_samples", "values", "sm_active_pct", 2],
    ),
    (
        "fb_used_bytes over 2^50",
        change(["mig_samples", "values", "fb_used_bytes", 0], 2**50 + 1),
        ["mig_samples", "values", "fb_used_bytes", 0],
    ),
    ("job position out of range", with_mig_jobs, ["mig_samples", "job", 3]),
]


@VERSIONS
@pytest.mark.parametrize(("what", "breaks", "loc"), BROKEN, ids=[case[0] for case in BROKEN])
def test_broken_mig_rule_is_refused_naming_it_and_nothing_is_stored(
    collector: RunningCollector, version: int, what: str, breaks: Callable[[dict[str, Any]], None], loc: Any
) -> None:
    body = batch()
    breaks(body)
    response = send(collector, body, version)
    assert response.status_code == 422, response.text
    got = response.json()["detail"][0]["loc"]
    if isinstance(loc, tuple):
        assert got[: len(loc[1])] == loc[1], got
    else:
        assert got == loc
    assert stored(collector) == NOTHING
    for table in ("mig_device", "mig_sample", "job_allocation"):
        assert count_rows(collector.dsn, table) == 0, table


@VERSIONS
def test_a_mig_device_made_again_in_one_batch_is_a_device_of_its_own(collector: RunningCollector, version: int) -> None:
    """Destroyed and created again at the same place during a batch: same instance ids, a new UUID."""
    body = batch()
    body["migs"][1]["gpu_instance_id"] = body["migs"][0]["gpu_instance_id"]
    response = send(collector, body, version)
    assert response.status_code == 200, response.text
    with psycopg.connect(collector.dsn) as conn:
        rows = conn.execute("SELECT gpu_instance_id, uuid FROM mig_device ORDER BY uuid").fetchall()
    assert len(rows) == 2 and rows[0][0] == rows[1][0] and rows[0][1] != rows[1][1]


# 3. Unknown MIG value keys: ignored, listed, and the batch stored.


@VERSIONS
def test_unknown_mig_value_key_is_ignored_and_listed(collector: RunningCollector, version: int) -> None:
    body = batch()
    body["mig_samples"]["values"]["quantum_flux"] = [1.0, 2.0, 3.0, 4.0]
    response = send(collector, body, version)
    assert response.status_code == 200, response.text
    assert response.json()["mig_rows"] == 4
    assert any("quantum_flux" in field for field in response.json()["ignored_fields"]), response.json()
    assert count_rows(collector.dsn, "mig_sample") == 4


# 4. Allocations per MIG device, each with its parent GPU.


@VERSIONS
def test_jobs_on_mig_devices_are_allocated_per_device(collector: RunningCollector, version: int) -> None:
    exporter, t = str(uuid.uuid4()), int(T0)
    first = batch(1, 3, exporter, mig_jobs=[(0, 1)] * 3)  # alice on device 0, bob on device 1; GPU 0: job null
    assert send(collector, first, version).status_code == 200
    assert allocations(collector.dsn) == [
        (0, UUID1, "200", t, t + 2, None, True),
        (0, UUID0, "100", t, t + 2, None, True),
    ]
    assert len({m for (m,) in query(collector.dsn, "SELECT mig_id FROM job_allocation")}) == 2
    second = batch(2, 3, exporter, offset=3, mig_jobs=[(0, 1), (2, 1), (2, 1)])  # device 0: alice, then carol
    assert send(collector, second, version).status_code == 200
    assert allocations(collector.dsn) == [
        (0, UUID1, "200", t, t + 5, None, True),  # untouched by its neighbour's change: extended
        (0, UUID0, "100", t, t + 3, t + 4, True),  # closed at the first sample of carol's run
        (0, UUID0, "300", t + 4, t + 5, None, True),
    ]
    assert count_rows(collector.dsn, "mig_device") == 2
    assert query(collector.dsn, "SELECT count(*) FROM job_allocation WHERE mig_id IS NULL") == [(0,)]


@VERSIONS
def test_mig_samples_without_job_change_no_allocation(collector: RunningCollector, version: int) -> None:
    exporter = str(uuid.uuid4())
    assert send(collector, batch(1, 2, exporter, mig_jobs=[(0, None)] * 2), version).status_code == 200
    assert send(collector, batch(2, 2, exporter, offset=2), version).status_code == 200  # no mig_samples.job
    assert [row[1:6:4] for row in allocations(collector.dsn)] == [(UUID0, None)]  # still open


# 5. An older exporter: no migs, no mig_samples.


@VERSIONS
def test_batch_without_migs_is_stored_as_before(collector: RunningCollector, version: int) -> None:
    response = send(collector, batch(with_migs=False, gpu_job=0), version)
    assert response.status_code == 200, response.text
    assert response.json() == {"duplicate": False, "gpu_rows": 4, "port_rows": 2, "mig_rows": 0, "ignored_fields": []}
    assert stored(collector) == {
        "node": 1,
        "gpu": 2,
        "ib_port": 1,
        "ingest_batch": 1,
        "gpu_sample": 4,
        "ib_port_sample": 2,
        "event": 0,
    }
    assert count_rows(collector.dsn, "mig_device") == 0 and count_rows(collector.dsn, "mig_sample") == 0
    t = int(T0)
    assert allocations(collector.dsn) == [(0, None, "100", t, t + 1, None, None)]  # whole GPU: mig_id NULL
