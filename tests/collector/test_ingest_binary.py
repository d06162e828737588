"""Format v2 (binary columns) against a real collector: the same batch stored as v1 stores, and each
way a binary body can be broken refused with the reason, writing nothing."""

from __future__ import annotations

import json
import struct
import time
import uuid
from typing import Any

import numpy as np
import pytest

from gpuscope.core.ingest_wire import BINARY_CONTENT_TYPE
from gpuscope.exporter.events import Event
from gpuscope.exporter.sim import JobSchedule, SimNodeSource, build_topology
from gpuscope.exporter.snapshot import JobInfo, Snapshot
from gpuscope.exporter.wire import Origin, encode_binary
from tests.collector.helpers import NOTHING, post, stored
from tests.conftest import count_rows
from tests.processes import RunningCollector

ROWS = 40  # 5 snapshots of 8 GPUs


def binary_batch(seq: int = 1) -> bytes:
    topology = build_topology(1, 8, 1, cluster="test")
    source = SimNodeSource(topology[0], JobSchedule(topology, 1), 1)
    now = time.time()
    snapshots = []
    for i in range(5):
        gpus, ports = source.read(now - 5 + i)
        snapshots.append(Snapshot(ts=now - 5 + i, gpus=gpus, ports=ports, jobs={0: JobInfo("j1", "alice")}))
    origin = Origin("test", "rack-00", "node-000", "sim", str(uuid.uuid4()))
    return encode_binary(origin, seq, snapshots, [Event(now - 1, 3, "xid", code=79)])


def send(collector: RunningCollector, body: bytes, content_type: str = BINARY_CONTENT_TYPE) -> Any:
    return post(collector, body, **{"Content-Type": content_type})


def split(body: bytes) -> tuple[dict[str, Any], int]:
    """The header and where the first block starts."""
    length = int.from_bytes(body[4:8], "little")
    return json.loads(body[8 : 8 + length]), (8 + length + 7) // 8 * 8


def with_header(body: bytes, change: Any) -> bytes:
    header, start = split(body)
    change(header)
    head = json.dumps(header).encode()
    return b"GPSB" + len(head).to_bytes(4, "little") + head + b"\0" * (-(8 + len(head)) % 8) + body[start:]


def poke(body: bytes, block_offset: int, fmt: str, value: Any) -> bytes:
    """Overwrite one value at `block_offset` bytes into the gpu block."""
    _, start = split(body)
    data = bytearray(body)
    struct.pack_into(fmt, data, start + block_offset, value)
    return bytes(data)


def test_binary_batch_is_stored_whole_with_jobs_and_events(collector: RunningCollector) -> None:
    response = send(collector, binary_batch())
    assert response.status_code == 200, response.text
    assert response.json()["gpu_rows"] == ROWS and response.json()["port_rows"] == ROWS
    assert count_rows(collector.dsn, "event") == 1
    assert count_rows(collector.dsn, "job_allocation") == 1
    assert send(collector, binary_batch()).json()["duplicate"] is False  # another exporter id


def test_binary_and_json_store_the_same_values(collector: RunningCollector) -> None:
    body = binary_batch()
    header, start = split(body)
    keys = header["gpu_samples"]["values"]
    ts = np.frombuffer(body, "<f8", ROWS, start)
    matrix = np.frombuffer(body, "<f8", ROWS * len(keys), start + 8 * ROWS).reshape(len(keys), ROWS)
    assert send(collector, body).status_code == 200
    import psycopg

    with psycopg.connect(collector.dsn) as conn:
        stored_power = conn.execute("SELECT power_w FROM gpu_sample ORDER BY ts, gpu_id").fetchall()
    sent_power = matrix[keys.index("power_w")][np.lexsort((np.arange(ROWS), ts))]
    np.testing.assert_allclose([p for (p,) in stored_power], sent_power, rtol=1e-6)


def up_offset(body: bytes) -> int:
    """ts and metrics (f64), job (i32), gpu (u16), then up (u8)."""
    keys = split(body)[0]["gpu_samples"]["values"]
    return 8 * ROWS * (1 + len(keys)) + 4 * ROWS + 2 * ROWS


TS = 0  # offsets into the gpu block: ts first, then the metric columns
FIRST_METRIC = 8 * ROWS


@pytest.mark.parametrize(
    ("mangle", "status", "needle"),
    [
        (lambda b: b"XXXX" + b[4:], 400, "must start with b'GPSB', this one starts b'XXXX'"),
        (lambda b: b[:4] + (10**6).to_bytes(4, "little") + b[8:], 400, "does not fit"),
        (lambda b: b[:-16], 400, "ends before"),
        (lambda b: b + b"\0" * 8, 400, "after the last block"),
        (lambda b: poke(b, TS, "<d", float("nan")), 422, "out of range"),
        (lambda b: poke(b, TS + 8, "<d", time.time() + 3600), 422, "future"),
        (lambda b: poke(b, FIRST_METRIC, "<d", float("inf")), 422, "overflows"),
        (lambda b: with_header(b, lambda h: h.update(version=1)), 422, "unsupported version"),
        (lambda b: with_header(b, lambda h: h["gpu_samples"].update(rows=-1)), 422, ">= 0"),
        (lambda b: with_header(b, lambda h: h["gpu_samples"].update(values=["util_pct", "util_pct"])), 422, "distinct"),
        (lambda b: with_header(b, lambda h: h["gpus"].pop()), 422, "not a gpu listed"),
        (lambda b: poke(b, up_offset(b), "<B", 7), 422, "must be 0 or 1"),
    ],
)
def test_broken_binary_body_is_refused_and_nothing_written(
    collector: RunningCollector, mangle: Any, status: int, needle: str
) -> None:
    response = send(collector, mangle(binary_batch()))
    assert response.status_code == status, response.text
    assert needle in response.text
    assert stored(collector) == NOTHING


def test_unknown_content_type_gets_415(collector: RunningCollector) -> None:
    response = send(collector, binary_batch(), content_type="application/x-protobuf")
    assert response.status_code == 415 and "application/json" in response.text


def test_every_column_has_finite_bounds() -> None:
    """Ingest's range check relies on it: an infinity falls outside finite bounds, so no separate isinf."""
    from gpuscope.collector.store.columns import GPU_COLUMNS, MIG_COLUMNS, PORT_COLUMNS

    for column in (*GPU_COLUMNS, *PORT_COLUMNS, *MIG_COLUMNS):
        assert np.isfinite(column.float_bounds).all(), column.key
