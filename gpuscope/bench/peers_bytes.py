"""Bytes per GPU-day alone: Prometheus's TSDB after its compaction beside TimescaleDB's columnstore, the
same telemetry stored both ways in one run. It is the storage figure of `gpuscope bench peers` without
the questions, the plain-PostgreSQL load and the ingest rates (a quarter of an hour at 1,024 GPUs rather
than the better part of an hour), with where each side's bytes go:

    python -m gpuscope.bench.peers_bytes [--gpus 1024] [--hours 24] [--json]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from gpuscope.bench import peers_timescale
from gpuscope.bench import prometheus_peer as prometheus
from gpuscope.bench.report import emit
from gpuscope.bench.telemetry import make_telemetry


def run(gpus: int = 1024, hours: float = 24) -> dict[str, Any]:
    why_not = peers_timescale.unavailable()
    if why_not:
        raise RuntimeError(why_not)
    telemetry = make_telemetry(gpus=gpus, hours=hours)
    with tempfile.TemporaryDirectory(prefix="gpuscope-bench-bytes-") as tmp:
        data = Path(tmp) / "prometheus"
        filled = prometheus.backfill(telemetry, data)
        with prometheus.PrometheusServer(data) as server:
            blocks = prometheus.wait_compacted(server)
            storage = prometheus.storage_figures(telemetry, data, filled.samples)
            chunks = sum(f.stat().st_size for f in data.glob("*/chunks/*"))
            index = sum(f.stat().st_size for f in data.glob("*/index"))
    timescale_bytes, loaded = peers_timescale.bytes_per_gpu_day(telemetry)
    gpu_days = gpus * telemetry.steps * telemetry.step_s / 86400
    return {
        "gpus": gpus,
        "hours": hours,
        "timescaledb_bytes_per_gpu_day": round(timescale_bytes),
        "timescaledb_gpus_loaded": loaded,
        "timescaledb_bytes_per_sample": round(timescale_bytes * gpu_days / filled.samples, 3),
        "prometheus_bytes_per_gpu_day": storage.bytes_per_gpu_day,
        "prometheus_bytes_per_sample": storage.bytes_per_sample,
        "prometheus_chunk_bytes_per_sample": round(chunks / filled.samples, 3),
        "prometheus_index_bytes_per_gpu_day": round(index / gpu_days),
        "prometheus_blocks": blocks,
        "samples": filled.samples,
        "bytes_ratio": round(timescale_bytes / storage.bytes_per_gpu_day, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1024, help="fleet size, a multiple of 8 (default 1024)")
    parser.add_argument("--hours", type=float, default=24, help="hours of samples at 10 s (default 24)")
    parser.add_argument("--json", action="store_true", help="also print one JSON object on the last line")
    args = parser.parse_args()
    emit("peers-bytes", run(args.gpus, args.hours), args.json)


if __name__ == "__main__":
    main()
