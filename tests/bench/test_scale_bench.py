"""`gpuscope bench scale` at a small size, so the bench cannot rot: its history loads and is kept up with
the clock, every cycle runs over the fleet's jobs, and each figure lands next to its interval."""

from __future__ import annotations

from gpuscope.bench import ingest
from gpuscope.bench.scale import measure, summary
from gpuscope.bench.scale_fleet import GPUS_PER_NODE, PORTS_PER_NODE


def test_the_scale_bench_runs_small(dsn: str) -> None:
    figures = measure(
        dsn, gpus=320, budget_s=0, min_minutes=20, straggler_cycles=4, alert_cycles=2, health_minutes=5,
        dashboard_runs=2,
    )  # fmt: skip
    nodes = 320 // GPUS_PER_NODE
    assert (figures["gpus"], figures["nodes"], figures["ports"]) == (320, nodes, nodes * PORTS_PER_NODE)
    # At least the minutes asked for, each a sample of every GPU and port every 10 s; all of it stored.
    assert 20 <= figures["simulated_minutes"] < 25
    assert figures["rows_loaded"] == round(figures["simulated_minutes"] * 6) * (320 + nodes * PORTS_PER_NODE)
    assert figures["rows_stored"] == figures["rows_written"] > figures["rows_loaded"]
    # One job per node on 80% of the nodes; the watch follows every one and fed them all alike.
    assert figures["jobs"] == figures["straggler_jobs"] == 32
    assert figures["straggler_jobs_fed_to_the_last_bucket"] is True
    assert 0 < figures["straggler_cycle_p50_s"] <= figures["straggler_cycle_s"] < figures["straggler_interval_s"]
    # The default rules ran without error and found the sprinkled faults.
    assert figures["alert_rules"] >= 15 and figures["alert_rule_errors"] == {}
    assert 0 < figures["alert_cycle_p50_s"] <= figures["alert_cycle_s"]
    assert any(name.startswith("GpuLost:") for name in figures["alerts"])
    assert any(name.startswith("InfinibandLinkDown:") for name in figures["alerts"])
    assert {"gpu_lost", "ecc_uncorrectable", "xid"} <= set(figures["health_findings_by_kind"])
    assert 0 < figures["health_cycle_p50_s"] <= figures["health_cycle_s"] and figures["health_interval_s"] == 30
    # Reads: 40 nodes fit the overview's node rows; the heatmap shows every GPU over the hour.
    assert figures["overview_heatmap_level"] in ("gpu", "node") and figures["heatmap_level"] == "gpu"
    assert figures["heatmap_rows"] == figures["heatmap_gpus_read"] == 320 and figures["heatmap_columns"] >= 60
    assert 0 < figures["overview_ms_p50"] <= figures["overview_ms"] and figures["heatmap_ms"] > 0
    # Storage: every part grew; per GPU-day it is what a day of 10 s rows of ~30 columns costs.
    parts = figures["db_bytes_per_day_by_part"]
    assert min(parts["gpu_samples"], parts["port_samples"], parts["rollups"], parts["ingest_batch"]) > 0
    assert 1e6 < figures["db_bytes_per_gpu_day"] < 2e7
    assert abs(figures["db_bytes_per_day"] - figures["db_bytes_per_gpu_day"] * 320) <= 320

    # Ingest headroom counts the port rows too: 320 GPU and 320 port rows every 10 s, 64 rows/s.
    headline = summary(figures, ingest_rows_per_s=128.0)
    assert list(headline)[:2] == ["gpus", "ingest_headroom"] and headline["ingest_headroom"] == 2.0
    assert headline["fleet_rows_per_s"] == 64 and headline["fleet_gpu_rows_per_s"] == 32
    assert headline["ingest_fits"] is True and headline["straggler_fits"] is True
    assert headline["all_fit"] == all(value for key, value in headline.items() if key.endswith("_fits"))
    assert summary(figures, ingest_rows_per_s=48.0)["all_fit"] is False  # enough for the GPU rows alone
    assert "ingest_headroom" not in summary(figures, None)


def test_the_straggler_watch_sharded_over_two_processes(dsn: str) -> None:
    """`--collectors 2`: two worker processes, each leading 8 of the 16 shards, together follow every job
    once; the figure is the slower of the two per cycle, against half the interval."""
    figures = measure(
        dsn, gpus=320, budget_s=0, min_minutes=20, straggler_cycles=3, alert_cycles=1, health_minutes=1,
        dashboard_runs=1, collectors=2,
    )  # fmt: skip
    assert figures["straggler_collectors"] == 2 and figures["shards_per_collector"] == [8, 8]
    assert sum(figures["jobs_per_collector"]) == figures["straggler_jobs"] == figures["jobs"] == 32
    assert min(figures["jobs_per_collector"]) > 0
    assert len(figures["straggler_shard_cycle_s"]) == 2
    assert figures["straggler_target_s"] == figures["straggler_interval_s"] / 2
    assert 0 < figures["straggler_cycle_p50_s"] <= figures["straggler_cycle_s"]


def test_the_ingest_bench_carries_port_rows_for_the_headroom() -> None:
    """`bench scale`'s ingest headroom: batches with the nodes' InfiniBand ports, every row stored."""
    figures = ingest.run(nodes=4, batches_per_node=2, ports_per_node=2)
    assert figures["batch_rows"] == (8 + 2) * 10 and figures["timed_rows"] == 4 * 100
    assert figures["stored_equals_sent"] is True and "ratio" not in figures
