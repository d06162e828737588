"""Helpers for tests against a running collector: posting batches, counting what was stored, and the
processes of an embedded PostgreSQL."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx

from gpuscope.core.ingest_wire import BINARY_CONTENT_TYPE
from gpuscope.exporter.events import Event
from gpuscope.exporter.sim import JobSchedule, SimNodeSource, build_topology
from gpuscope.exporter.snapshot import Snapshot
from gpuscope.exporter.wire import Origin, encode_batch, encode_binary
from tests.conftest import count_rows
from tests.processes import RunningCollector

TABLES = ("node", "gpu", "ib_port", "ingest_batch", "gpu_sample", "ib_port_sample", "event")
NOTHING = dict.fromkeys(TABLES, 0)


def post(
    collector: RunningCollector, body: bytes | dict[str, Any], token: str | None = "use-right", **headers: str
) -> httpx.Response:
    """POST /api/v1/samples; the collector's own token unless `token` says otherwise (None: no header)."""
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    if token == "use-right":
        token = collector.token
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.post(f"{collector.url}/api/v1/samples", content=body, headers=headers, timeout=10)


def push_binary(
    collector: RunningCollector, origin: Origin, seq: int, snapshots: list[Snapshot], events: list[Event] | None = None
) -> httpx.Response:
    """POST snapshots as the exporter sends them (format v2), and fail the test unless they were stored."""
    body = encode_binary(origin, seq, snapshots, events or ())
    response = post(collector, body, **{"Content-Type": BINARY_CONTENT_TYPE})
    assert response.status_code == 200, response.text
    return response


def stored(collector: RunningCollector) -> dict[str, int]:
    """Rows in each table ingest writes."""
    return {table: count_rows(collector.dsn, table) for table in TABLES}


def batch_at(ts: float, seq: int) -> dict[str, object]:
    """A batch of one snapshot of a two-GPU node, taken at `ts`."""
    topology = build_topology(1, 2, 1, cluster="late")
    gpus, ports = SimNodeSource(topology[0], JobSchedule(topology, 1), 1).read(ts)
    return encode_batch(
        Origin("late", "r", "n", "sim", str(uuid.uuid4())), seq, [Snapshot(ts=ts, gpus=gpus, ports=ports)]
    )


def postmaster_pids(pgdata: Path) -> list[int]:
    """Processes whose command line names this data directory."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(pgdata) in cmdline:
                pids.append(int(entry.name))
    return pids
