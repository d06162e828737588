"""Simulated exporters -> HTTP push -> collector -> PostgreSQL -> the dashboard's data function."""

from __future__ import annotations

import math

import httpx
import numpy as np

from gpuscope.core.pools import open_read_pool
from gpuscope.dashboard.data import load_overview
from gpuscope.dashboard.figures import heatmap_figure, rack_power_figure
from gpuscope.exporter.node_exporter import ExporterConfig, NodeExporter
from gpuscope.exporter.sim import JobSchedule, SimNodeSource, build_topology
from tests.conftest import count_rows
from tests.processes import RunningCollector
from tests.waiting import eventually


def test_pushed_simulated_gpus_appear_in_the_dashboard_heatmap(collector: RunningCollector) -> None:
    topology = build_topology(4, 8, 2, cluster="e2e")
    schedule = JobSchedule(topology, 9)
    exporters = [
        NodeExporter(
            SimNodeSource(node, schedule, 9),
            ExporterConfig(
                node.cluster,
                node.rack,
                node.name,
                interval=0.25,
                push_url=collector.url,
                token=collector.token,
                push_interval=0.5,
            ),
        )
        for node in topology
    ]
    for exporter in exporters:
        exporter.start()
    try:
        eventually(
            lambda: count_rows(collector.dsn, "gpu_sample") >= 32 * 4,
            timeout=20,
            interval=0.2,
            what="four snapshots of each of the 32 GPUs",
        )
    finally:
        for exporter in exporters:
            exporter.stop()
    sent = sum(e.pusher.stats.snapshots_sent for e in exporters if e.pusher)
    assert count_rows(collector.dsn, "gpu_sample") == sent * 8, "every pushed sample stored exactly once"

    pool = open_read_pool(collector.dsn, max_size=2)
    try:
        data = load_overview(pool, "15m")
    finally:
        pool.close()

    expected = {(f"e2e/{e.config.rack}", e.config.node, g.index) for e in exporters for g in e.source.gpus}  # type: ignore[attr-defined]
    rows = data.heatmap.rows
    assert data.heatmap.level == "gpu", "32 GPUs fit the cell budget one row each"
    assert {(r.rack, r.node, r.gpu) for r in rows} == expected
    assert [r.label for r in rows] == sorted(r.label for r in rows), "grouped by rack, then node, then GPU"
    latest = data.heatmap.values[:, ~np.all(np.isnan(data.heatmap.values), axis=0)]
    assert latest.shape[1] >= 1 and not np.isnan(latest).all(axis=1).any(), "every GPU has a value"
    assert np.nanmin(latest) >= 0 and np.nanmax(latest) <= 100
    assert data.summary.gpus_known == 32 and data.summary.gpus_reporting == 32
    assert data.rack_power.racks == ["e2e/rack-00", "e2e/rack-01"]
    assert 0 < np.nanmax(data.rack_power.watts) <= 16 * 700

    figure = heatmap_figure(data.heatmap, revision="15m")
    assert len(figure.data[0].y) == 32 and figure.layout.uirevision == "15m"
    assert figure.data[0].y[-1] == rows[0].label, "plotted bottom-up: the first rack on top"
    assert rack_power_figure(data.rack_power, revision="15m").layout.uirevision == "15m"


def test_read_api_serves_the_same_heatmap(collector: RunningCollector) -> None:
    topology = build_topology(1, 8, 1, cluster="api")
    exporter = NodeExporter(
        SimNodeSource(topology[0], JobSchedule(topology, 4), 4),
        ExporterConfig(
            "api", "rack-00", "node-000", interval=0.2, push_url=collector.url, token=collector.token, push_interval=0.5
        ),
    )
    exporter.start()
    try:
        eventually(lambda: count_rows(collector.dsn, "gpu_sample") >= 8, what="a pushed snapshot of the 8 GPUs")
    finally:
        exporter.stop()
    heatmap = httpx.get(f"{collector.url}/api/v1/heatmap", params={"minutes": 5, "metric": "power_w"}).json()
    assert len(heatmap["gpus"]) == 8 and heatmap["metric"] == "power_w"
    assert len(heatmap["values"]) == 8 and len(heatmap["values"][0]) == len(heatmap["times"])
    cells = [v for row in heatmap["values"] for v in row if v is not None]
    assert cells and all(0 < v <= 700 and not math.isnan(v) for v in cells)
    power = httpx.get(f"{collector.url}/api/v1/rack-power", params={"minutes": 5}).json()
    assert power["racks"] == ["api/rack-00"]
    bad = httpx.get(f"{collector.url}/api/v1/heatmap", params={"metric": "power_w; DROP TABLE gpu"})
    assert bad.status_code == 422 and "unknown metric" in bad.text
    assert httpx.get(f"{collector.url}/api/v1/heatmap", params={"minutes": 0}).status_code == 422
