"""`gpuscope bench federation` at a tiny size: two cluster databases under a postgres_fdw coordinator.

What must hold at any size: the coordinator answers the four questions as one database holding the
same data does (the job here spans both cluster databases: 32 GPUs, jobs of up to 64), every row
written to a cluster database is seen once through the coordinator, aggregates go down to the
clusters, and a cluster database that is frozen or stopped fails the query with postgres_fdw's error
naming its server, within the connect timeout, rather than hanging it."""

from __future__ import annotations

import numpy as np

from gpuscope.bench import federation
from gpuscope.bench.federation_questions import differences
from gpuscope.bench.federation_schema import CONNECT_TIMEOUT_S


def test_the_coordinator_answers_as_one_database_and_names_a_cluster_that_is_down() -> None:
    figures = federation.run(
        instances=2, gpus_per_instance=16, hours=0.5, runs=1, ingest_nodes=4, ingest_batches=2, routed_rows=200
    )
    for name in ("heatmap", "rack_power", "job", "hottest"):
        assert figures[f"{name}_answers_equal"], (name, figures.get(f"{name}_differences"))
        p50, p95 = figures[f"{name}_coordinator_ms"]
        assert 0 < p50 <= p95
    assert figures["all_answers_equal"]

    assert figures["rows_visible_once"], (figures["cluster_rows"], figures["coordinator_rows"])
    assert all(rows > 0 for rows in figures["cluster_rows"])
    assert figures["ingest_one_instance_rows_per_s"] > 0
    assert figures["ingest_all_instances_rows_per_s"] > 0
    assert figures["copy_through_coordinator_rows_per_s"] > 0
    assert figures["collector_writer_on_coordinator"] != "stored"  # ingest goes to the cluster databases

    heatmap = figures["heatmap_pushdown"]
    assert heatmap["aggregates_pushed"] >= 2, heatmap  # one per cluster database
    assert heatmap["async_scans"] >= 2, heatmap

    assert figures["down_server"] == "cluster_1"
    for state in ("frozen", "stopped"):
        error = figures[f"{state}_instance_error"]
        assert 'could not connect to server "cluster_1"' in error, error
        assert figures[f"{state}_instance_s"] < CONNECT_TIMEOUT_S + 2
    assert "timeout expired" in figures["frozen_instance_error"]


def test_answers_that_differ_beyond_float4_rounding_are_told_apart() -> None:
    grid = np.array([[1.0, np.nan], [587.18933105, 3.0]])
    assert differences((["a"], grid), (["a"], grid.copy())) == []
    rounded = grid.copy()
    rounded[1, 0] = 587.18929036  # one float4 step: the rollups' own rounding
    assert differences(grid, rounded) == []
    wrong = grid.copy()
    wrong[1, 1] = 3.001
    assert differences(grid, wrong) == ["1 values differ"]
    assert differences(grid, np.where(np.isnan(grid), 0.0, grid)) == ["missing values differ"]
    assert differences(["a", "b"], ["b", "a"]) != []
