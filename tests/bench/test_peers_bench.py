"""`gpuscope bench peers` end to end at a small size, so that it cannot rot: 48 GPUs for an hour in
gpuscope's store and a real Prometheus, the five questions answered right by both, bytes and ingest
rates measured, the JSON keys the issue names present. The figures themselves mean little at this size."""

from __future__ import annotations

import pytest

from gpuscope.bench import peers
from tests.conftest import require_tool


def test_the_peers_bench_runs_small() -> None:
    require_tool("prometheus")
    require_tool("promtool")
    figures = peers.run(gpus=48, hours=1, runs=2, ingest_nodes=6, ingest_batches=3, compact=False)
    for key in (
        "worst_latency_ratio",
        "gpuscope_bytes_per_gpu_day",
        "prometheus_bytes_per_gpu_day",
        "gpuscope_samples_per_s",
        "prometheus_samples_per_s",
    ):
        assert figures[key] > 0, key
    assert figures["all_answers_right"], figures
    for question in ("heatmap", "rack_power", "job", "hottest", "one_gpu"):
        p50, p95 = figures[f"{question}_gpuscope_ms"]
        assert 0 < p50 <= p95
        assert figures[f"{question}_prometheus_raw_ms"][0] > 0
    assert figures["worst_latency_ratio"] == pytest.approx(
        max(figures[f"{q}_ratio"] for q in ("heatmap", "rack_power", "job", "hottest", "one_gpu")), abs=1e-3
    )
    assert "rules" in str(figures.keys()), "recording rules asked too"
    # A row carries every metric a GPU reports plus up: Prometheus stores each as a sample of its own.
    assert figures["gpuscope_samples_per_row"] > 10
    assert figures["gpuscope_plain_bytes_per_gpu_day"] > figures["prometheus_bytes_per_gpu_day"]
