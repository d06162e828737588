"""Valid ingest batches built from docs/ingest-format.md alone (as a third-party sender would write them),
in version 1 (a JSON-ready dict) and version 2 (binary columns), for the fuzz tests to start from."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

FORMAT = "gpuscope-samples"
BINARY = "application/x-gpuscope-samples"


def v1_batch(
    *,
    exporter_id: str,
    seq: int,
    cluster: str = "fuzz",
    rack: str = "rack-0",
    node: str = "node-0",
    gpus: int = 2,
    rows: int = 2,
    ports: int = 1,
    jobs: int = 1,
    events: int = 1,
    start: float | None = None,
) -> dict[str, Any]:
    """`rows` snapshots, one second apart and ending a minute ago, of a node with `gpus` GPUs and `ports`
    InfiniBand ports; `jobs` jobs (0: no `jobs` member at all) spread over the GPUs; `events` events."""
    start = start if start is not None else time.time() - 60 - rows
    ts = [round(start + i, 3) for i in range(rows) for _ in range(gpus)]
    gpu = [g for _ in range(rows) for g in range(gpus)]
    batch: dict[str, Any] = {
        "format": FORMAT,
        "version": 1,
        "exporter_id": exporter_id,
        "seq": seq,
        "source": {"cluster": cluster, "rack": rack, "node": node, "backend": "sim"},
        "gpus": [
            {
                "index": g,
                "uuid": f"GPU-{node}-{g}",
                "model": "NVIDIA H100 80GB HBM3",
                "pci_bus_id": f"00000000:{g:02x}:00.0",
            }
            for g in range(gpus)
        ],
        "ports": [{"device": f"mlx5_{p}", "port": 1} for p in range(ports)],
        "gpu_samples": {
            "ts": ts,
            "gpu": gpu,
            "up": [True] * len(ts),
            "values": {
                "util_pct": [float(50 + g) for g in gpu],
                "power_w": [400.5] * len(ts),
                "temp_c": [60] * len(ts),
                "fb_used_bytes": [2**36] * len(ts),
                "nvlink_tx_bytes": [2**62 + i for i in range(len(ts))],
            },
        },
        "port_samples": {
            "ts": [round(start + i, 3) for i in range(rows) for _ in range(ports)],
            "port": [p for _ in range(rows) for p in range(ports)],
            "values": {
                "xmit_bytes": [1000 * i for i in range(rows * ports)],
                "state": [4] * (rows * ports),
            },
        },
    }
    if jobs:
        batch["jobs"] = [{"id": f"{node}-job-{j}", "user": "alice"} for j in range(jobs)]
        batch["gpu_samples"]["job"] = [g % (jobs + 1) - 1 for g in gpu]  # -1: no job on that GPU
    if events:
        batch["events"] = [
            {"ts": round(start + i * 0.5, 3), "gpu": i % gpus, "kind": "xid", "code": 79, "count": 1,
             "message": "GPU has fallen off the bus"}
            for i in range(events)
        ]  # fmt: skip
    return batch


def v1_body(batch: dict[str, Any]) -> bytes:
    return json.dumps(batch, allow_nan=False, separators=(",", ":")).encode()


def v2_body(batch: dict[str, Any]) -> bytes:
    """The same batch in version 2: header, then each block's columns as little-endian arrays."""
    header, blocks = v2_parts(batch)
    return v2_assemble(json.dumps(header, allow_nan=False, separators=(",", ":")).encode(), blocks)


def v2_parts(batch: dict[str, Any]) -> tuple[dict[str, Any], list[bytes]]:
    """A version 1 batch as a version 2 header and the bytes of its two blocks (gpu, port), unpadded."""
    header = {k: v for k, v in batch.items() if k not in ("gpu_samples", "port_samples")}
    header["version"] = 2
    blocks = []
    for key, device in (("gpu_samples", "gpu"), ("port_samples", "port")):
        samples = batch[key]
        header[key] = {"rows": len(samples["ts"]), "values": list(samples["values"])}
        arrays = [np.array(samples["ts"], "<f8")]
        arrays += [np.array([np.nan if v is None else v for v in vs], "<f8") for vs in samples["values"].values()]
        if key == "gpu_samples" and "jobs" in batch:
            arrays.append(np.array([-1 if j is None else j for j in samples["job"]], "<i4"))
        arrays.append(np.array(samples[device], "<u2"))
        if key == "gpu_samples":
            arrays.append(np.array(samples["up"], "u1"))
        blocks.append(b"".join(a.tobytes() for a in arrays))
    return header, blocks


def v2_assemble(header: bytes, blocks: list[bytes], header_length: int | None = None) -> bytes:
    """ "GPSB", the header's length (or `header_length`, a lie), the header, then each block, each padded
    with zero bytes to a multiple of 8 from the start of the body."""
    size = len(header) if header_length is None else header_length
    parts = [b"GPSB", size.to_bytes(4, "little"), header]
    for block in blocks:
        parts.append(b"\0" * (-sum(map(len, parts)) % 8))
        parts.append(block)
    parts.append(b"\0" * (-sum(map(len, parts)) % 8))
    return b"".join(parts)
