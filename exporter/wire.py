"""Encodes snapshots into the collector's ingest format (docs/ingest-format.md): version 1 (JSON,
gzip) or version 2 (a JSON header and binary columns, what the pusher sends)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuscope.exporter.catalog import keys_for
from gpuscope.exporter.events import Event
from gpuscope.exporter.snapshot import GpuReading, JobInfo, Snapshot

FORMAT = "gpuscope-samples"
VERSION = 1
BINARY_VERSION = 2
BINARY_MAGIC = b"GPSB"


@dataclass(frozen=True)
class Origin:
    cluster: str
    rack: str
    node: str
    backend: str
    exporter_id: str  # random per exporter process; (exporter_id, seq) names a batch for de-duplication


# The MIG keys the ingest format takes (docs/ingest-format.md), from the "mig" catalog keys of the same name.
MIG_KEYS = ("fb_used_bytes", "fb_total_bytes", "sm_active_pct", "tensor_active_pct")


@dataclass
class _Columns:
    """One pass over the snapshots: metadata and the sample columns as lists (None: not reported)."""

    gpus: dict[int, dict[str, object]] = field(default_factory=dict)
    ports: dict[tuple[str, int], int] = field(default_factory=dict)
    jobs: dict[JobInfo, int] | None = None
    gpu_cols: dict[str, list[object]] = field(default_factory=lambda: {"ts": [], "gpu": [], "up": []})
    gpu_values: dict[str, list[float | None]] = field(default_factory=lambda: {k: [] for k in keys_for("gpu")})
    port_cols: dict[str, list[object]] = field(default_factory=lambda: {"ts": [], "port": []})
    port_values: dict[str, list[float | None]] = field(default_factory=lambda: {k: [] for k in keys_for("ib")})
    # MIG devices: (GPU index, MIG UUID) -> (position in "migs", its entry); rows travel as JSON in both versions.
    migs: dict[tuple[int, str], tuple[int, dict[str, object]]] = field(default_factory=dict)
    mig_cols: dict[str, list[object]] = field(default_factory=lambda: {"ts": [], "mig": []})
    mig_values: dict[str, list[float | None]] = field(default_factory=lambda: {k: [] for k in MIG_KEYS})


def _collect(snapshots: Sequence[Snapshot]) -> _Columns:
    out = _Columns()
    if any(snap.jobs is not None for snap in snapshots):
        out.jobs = {}
        out.gpu_cols["job"] = []
    if out.jobs is not None and any(snap.mig_jobs is not None for snap in snapshots):
        out.mig_cols["job"] = []
    for snap in snapshots:
        for reading in snap.gpus:
            gpu = reading.gpu
            out.gpus.setdefault(
                gpu.index, {"index": gpu.index, "uuid": gpu.uuid, "model": gpu.model, "pci_bus_id": gpu.pci_bus_id}
            )
            out.gpu_cols["ts"].append(snap.ts)
            out.gpu_cols["gpu"].append(gpu.index)
            out.gpu_cols["up"].append(reading.up)
            if out.jobs is not None:
                # A GPU whose MIG devices carry the jobs has none of its own: its work would count twice.
                by_instance = bool(reading.mig) and "job" in out.mig_cols
                job = None if by_instance else (snap.jobs or {}).get(gpu.index)
                out.gpu_cols["job"].append(_job_ref(out.jobs, job))
            for key, column in out.gpu_values.items():
                column.append(reading.values.get(key))
            if reading.mig:
                _collect_mig(out, snap, reading)
        for port_reading in snap.ports:
            position = out.ports.setdefault((port_reading.port.device, port_reading.port.port), len(out.ports))
            out.port_cols["ts"].append(snap.ts)
            out.port_cols["port"].append(position)
            for key, column in out.port_values.items():
                column.append(port_reading.values.get(key))
    # A metric no device reported in this batch is left out rather than sent as all nulls.
    out.gpu_values = _drop_empty(out.gpu_values)
    out.port_values = _drop_empty(out.port_values)
    out.mig_values = _drop_empty(out.mig_values)
    return out


def _collect_mig(out: _Columns, snap: Snapshot, reading: GpuReading) -> None:
    index = reading.gpu.index
    for mig in reading.mig:
        entry = {
            "gpu": index,
            "gpu_instance_id": mig.gpu_instance_id,
            "compute_instance_id": mig.compute_instance_id,
            "uuid": mig.uuid,
            "profile": mig.profile,
            "slices": mig.slices,
            "gpu_slices": mig.gpu_slices,
        }
        position, _ = out.migs.setdefault((index, mig.uuid), (len(out.migs), entry))
        out.mig_cols["ts"].append(snap.ts)
        out.mig_cols["mig"].append(position)
        if "job" in out.mig_cols and out.jobs is not None:
            out.mig_cols["job"].append(_job_ref(out.jobs, (snap.mig_jobs or {}).get(mig.uuid)))
        for key, column in out.mig_values.items():
            column.append(mig.values.get(f"mig_{key}"))


def _job_ref(jobs: dict[JobInfo, int], job: JobInfo | None) -> int | None:
    return None if job is None else jobs.setdefault(job, len(jobs))


def _mig_members(cols: _Columns) -> dict[str, object]:
    """The optional "migs" and "mig_samples" members: left out on a node with no GPU in MIG mode."""
    if not cols.migs:
        return {}
    migs = [entry for _, entry in cols.migs.values()]
    return {"migs": migs, "mig_samples": {**cols.mig_cols, "values": cols.mig_values}}


def _header(origin: Origin, seq: int, version: int, cols: _Columns, events: Sequence[Event]) -> dict[str, object]:
    return {
        "format": FORMAT,
        "version": version,
        "exporter_id": origin.exporter_id,
        "seq": seq,
        "source": {"cluster": origin.cluster, "rack": origin.rack, "node": origin.node, "backend": origin.backend},
        "gpus": list(cols.gpus.values()),
        "ports": [{"device": device, "port": port} for (device, port) in cols.ports],
        **({"jobs": [_job(job) for job in cols.jobs]} if cols.jobs is not None else {}),
        **({"events": [_event(e) for e in events]} if events else {}),
        **_mig_members(cols),
    }


def encode_batch(
    origin: Origin, seq: int, snapshots: Sequence[Snapshot], events: Sequence[Event] = ()
) -> dict[str, object]:
    """Format v1 as a JSON-ready dict."""
    cols = _collect(snapshots)
    return {
        **_header(origin, seq, VERSION, cols, events),
        "gpu_samples": {**cols.gpu_cols, "values": cols.gpu_values},
        "port_samples": {**cols.port_cols, "values": cols.port_values},
    }


def to_body(batch: dict[str, object]) -> bytes:
    """Format v1 body: gzip-compressed JSON; strict (no NaN) because the collector rejects it."""
    return gzip.compress(json.dumps(batch, allow_nan=False, separators=(",", ":")).encode(), compresslevel=5)


def encode_binary(origin: Origin, seq: int, snapshots: Sequence[Snapshot], events: Sequence[Event] = ()) -> bytes:
    """Format v2 body: the header as JSON, then each sample block's columns as little-endian arrays."""
    cols = _collect(snapshots)
    header = {
        **_header(origin, seq, BINARY_VERSION, cols, events),
        "gpu_samples": {"rows": len(cols.gpu_cols["ts"]), "values": list(cols.gpu_values)},
        "port_samples": {"rows": len(cols.port_cols["ts"]), "values": list(cols.port_values)},
    }
    head = json.dumps(header, allow_nan=False, separators=(",", ":")).encode()
    parts = [BINARY_MAGIC, len(head).to_bytes(4, "little"), head]
    gpu_arrays = [np.array(cols.gpu_cols["ts"], dtype="<f8")]
    gpu_arrays += [np.array(values, dtype="<f8") for values in cols.gpu_values.values()]  # None -> NaN
    if cols.jobs is not None:
        gpu_arrays.append(np.array([-1 if j is None else j for j in cols.gpu_cols["job"]], dtype="<i4"))
    gpu_arrays += [np.array(cols.gpu_cols["gpu"], dtype="<u2"), np.array(cols.gpu_cols["up"], dtype="u1")]
    port_arrays = [np.array(cols.port_cols["ts"], dtype="<f8")]
    port_arrays += [np.array(values, dtype="<f8") for values in cols.port_values.values()]
    port_arrays.append(np.array(cols.port_cols["port"], dtype="<u2"))
    for block in (gpu_arrays, port_arrays):
        _pad(parts)
        parts.extend(array.tobytes() for array in block)
    _pad(parts)
    return b"".join(parts)


def _pad(parts: list[bytes]) -> None:
    size = sum(len(p) for p in parts)
    parts.append(b"\0" * (-size % 8))


def _job(job: JobInfo) -> dict[str, object]:
    out: dict[str, object] = {"id": job.job_id, "user": job.user}
    for key in ("namespace", "pod", "container", "workload", "account", "partition"):  # Kubernetes; Slurm
        if getattr(job, key) is not None:
            out[key] = getattr(job, key)
    return out


def _event(event: Event) -> dict[str, object]:
    out: dict[str, object] = {"ts": event.ts, "gpu": event.gpu, "kind": event.kind, "count": event.count}
    if event.code is not None:
        out["code"] = event.code
    return out


def _drop_empty(columns: dict[str, list[float | None]]) -> dict[str, list[float | None]]:
    return {key: values for key, values in columns.items() if any(v is not None for v in values)}
