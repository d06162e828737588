"""Encodes snapshots into the collector's ingest format, version 1 (docs/ingest-format.md)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from dataclasses import dataclass

from exporter.catalog import keys_for
from exporter.events import Event
from exporter.snapshot import Snapshot

FORMAT = "gpuscope-samples"
VERSION = 1


@dataclass(frozen=True)
class Origin:
    cluster: str
    rack: str
    node: str
    backend: str
    exporter_id: str  # random per exporter process; (exporter_id, seq) names a batch for de-duplication


def encode_batch(
    origin: Origin, seq: int, snapshots: Sequence[Snapshot], events: Sequence[Event] = ()
) -> dict[str, object]:
    gpus: dict[int, dict[str, object]] = {}
    ports: dict[tuple[str, int], int] = {}
    gpu_cols: dict[str, list[object]] = {"ts": [], "gpu": [], "up": []}
    gpu_values: dict[str, list[float | None]] = {key: [] for key in keys_for("gpu")}
    with_jobs = any(snap.jobs is not None for snap in snapshots)
    jobs: dict[tuple[str, str | None], int] = {}
    if with_jobs:
        gpu_cols["job"] = []
    port_cols: dict[str, list[object]] = {"ts": [], "port": []}
    port_values: dict[str, list[float | None]] = {key: [] for key in keys_for("ib")}
    for snap in snapshots:
        for reading in snap.gpus:
            gpu = reading.gpu
            gpus.setdefault(
                gpu.index, {"index": gpu.index, "uuid": gpu.uuid, "model": gpu.model, "pci_bus_id": gpu.pci_bus_id}
            )
            gpu_cols["ts"].append(snap.ts)
            gpu_cols["gpu"].append(gpu.index)
            gpu_cols["up"].append(reading.up)
            if with_jobs:
                job = (snap.jobs or {}).get(gpu.index)
                gpu_cols["job"].append(None if job is None else jobs.setdefault((job.job_id, job.user), len(jobs)))
            for key, column in gpu_values.items():
                column.append(reading.values.get(key))
        for port_reading in snap.ports:
            position = ports.setdefault((port_reading.port.device, port_reading.port.port), len(ports))
            port_cols["ts"].append(snap.ts)
            port_cols["port"].append(position)
            for key, column in port_values.items():
                column.append(port_reading.values.get(key))
    return {
        "format": FORMAT,
        "version": VERSION,
        "exporter_id": origin.exporter_id,
        "seq": seq,
        "source": {"cluster": origin.cluster, "rack": origin.rack, "node": origin.node, "backend": origin.backend},
        "gpus": list(gpus.values()),
        "ports": [{"device": device, "port": port} for (device, port) in ports],
        **({"jobs": [{"id": job_id, "user": user} for (job_id, user) in jobs]} if with_jobs else {}),
        # A metric no device reported in this batch is left out rather than sent as all nulls.
        "gpu_samples": {**gpu_cols, "values": _drop_empty(gpu_values)},
        "port_samples": {**port_cols, "values": _drop_empty(port_values)},
        **({"events": [_event(e) for e in events]} if events else {}),
    }


def _event(event: Event) -> dict[str, object]:
    out: dict[str, object] = {"ts": event.ts, "gpu": event.gpu, "kind": event.kind, "count": event.count}
    if event.code is not None:
        out["code"] = event.code
    return out


def to_body(batch: dict[str, object]) -> bytes:
    """Gzip-compressed JSON; strict (no NaN) because the collector rejects it."""
    return gzip.compress(json.dumps(batch, allow_nan=False, separators=(",", ":")).encode(), compresslevel=5)


def _drop_empty(columns: dict[str, list[float | None]]) -> dict[str, list[float | None]]:
    return {key: values for key, values in columns.items() if any(v is not None for v in values)}
