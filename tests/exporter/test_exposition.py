"""/metrics and /healthz over a real HTTP server, from a snapshot of simulated readings."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from gpuscope.exporter.exposition import ExporterIdentity, Exposition
from gpuscope.exporter.node_exporter import ExporterConfig, NodeExporter
from gpuscope.exporter.sim import JobSchedule, SimNodeSource, build_topology
from gpuscope.exporter.snapshot import GpuReading, Snapshot
from tests.waiting import eventually

T0 = 1_790_000_000.0


@pytest.fixture
def exporter() -> Iterator[NodeExporter]:
    topology = build_topology(2, 8, 1)
    source = SimNodeSource(topology[0], JobSchedule(topology, 3), 3)
    node = NodeExporter(source, ExporterConfig("c1", "r1", "node-000", interval=0.2, listen="127.0.0.1:0"))
    node.start()
    yield node
    node.stop()


def fetch(exporter: NodeExporter, path: str, accept: str | None = None) -> tuple[int, str, str]:
    host, port = exporter.address or ("", 0)
    request = urllib.request.Request(f"http://{host}:{port}{path}", headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()


def wait_for_snapshot(exporter: NodeExporter) -> Snapshot:
    return eventually(lambda: exporter.sampler.latest, timeout=5, interval=0.02, what="the exporter's first snapshot")


def test_metrics_serves_every_gpu_and_port_in_base_units(exporter: NodeExporter) -> None:
    snapshot = wait_for_snapshot(exporter)
    status, content_type, body = fetch(exporter, "/metrics")
    assert status == 200 and content_type.startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(body)}
    power = families["gpuscope_gpu_power_watts"]
    assert len(power.samples) == 8
    assert {s.labels["gpu"] for s in power.samples} == {str(i) for i in range(8)}
    assert len(families["gpuscope_ib_port_transmit_bytes"].samples) == 8  # counter: the parser strips _total
    clocks = [s.value for s in families["gpuscope_gpu_sm_clock_hertz"].samples]
    assert all(3e8 <= c <= 1.98e9 for c in clocks), "MHz must be exposed as Hz"
    utilisation = [s.value for s in families["gpuscope_gpu_utilization_ratio"].samples]
    assert all(0 <= u <= 1 for u in utilisation), "percent must be exposed as a ratio"
    uuids = {s.labels["uuid"] for s in families["gpuscope_gpu_info"].samples}
    assert uuids == {r.gpu.uuid for r in snapshot.gpus}


def test_openmetrics_by_content_negotiation(exporter: NodeExporter) -> None:
    wait_for_snapshot(exporter)
    status, content_type, body = fetch(exporter, "/metrics", accept="application/openmetrics-text; version=1.0.0")
    assert status == 200 and content_type.startswith("application/openmetrics-text")
    assert body.endswith("# EOF\n")
    names = {f.name for f in parse_openmetrics(body)}
    assert "gpuscope_gpu_energy_joules" in names


def test_unsupported_field_is_absent_not_zero() -> None:
    """A GPU that lacks a field (e.g. no memory temperature) exposes no sample for it, not 0 or NaN."""
    topology = build_topology(1, 8, 1)
    gpus, ports = SimNodeSource(topology[0], JobSchedule(topology, 3), 3).read(T0)
    readings = list(gpus)
    readings[2] = GpuReading(
        readings[2].gpu, up=True, values={k: v for k, v in readings[2].values.items() if k != "mem_temp_c"}
    )
    pinned = Snapshot(ts=T0, gpus=tuple(readings), ports=ports)
    exposition = Exposition(ExporterIdentity("c", "r", "n", "sim", "test"), lambda: pinned)
    body, _ = exposition.render(None)
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    memory_temp_gpus = {s.labels["gpu"] for s in families["gpuscope_gpu_memory_temperature_celsius"].samples}
    assert memory_temp_gpus == {"0", "1", "3", "4", "5", "6", "7"}
    assert b"NaN" not in body


def test_each_snapshot_is_rendered_once_per_format() -> None:
    topology = build_topology(1, 8, 1)
    gpus, ports = SimNodeSource(topology[0], JobSchedule(topology, 3), 3).read(T0)
    current = [Snapshot(ts=T0, gpus=gpus, ports=ports)]
    exposition = Exposition(ExporterIdentity("c", "r", "n", "sim", "test"), lambda: current[0])
    first, _ = exposition.render(None)
    assert exposition.render(None)[0] is first
    current[0] = Snapshot(ts=T0 + 1, gpus=gpus, ports=ports)
    assert exposition.render(None)[0] is not first


def test_healthz_reports_snapshot_age(exporter: NodeExporter) -> None:
    wait_for_snapshot(exporter)
    status, content_type, body = fetch(exporter, "/healthz")
    assert status == 200 and '"status": "ok"' in body and content_type == "application/json"
    assert fetch(exporter, "/nope")[0] == 404


def test_jobs_are_exposed_as_info_for_promql_joins() -> None:
    from gpuscope.exporter.snapshot import JobInfo

    topology = build_topology(1, 4, 1)
    gpus, ports = SimNodeSource(topology[0], JobSchedule(topology, 3), 3).read(T0)

    def render(snapshot: Snapshot) -> bytes:
        return Exposition(ExporterIdentity("c", "r", "n", "sim", "t"), lambda: snapshot).render(None)[0]

    with_jobs = Snapshot(ts=T0, gpus=gpus, ports=ports, jobs={1: JobInfo("4242", "ada"), 3: JobInfo("77")})
    families = {f.name: f for f in text_string_to_metric_families(render(with_jobs).decode())}
    samples = {
        (s.labels["gpu"], s.labels["job_id"], s.labels["user"]): s.value
        for s in families["gpuscope_gpu_job_info"].samples
    }
    assert samples == {("1", "4242", "ada"): 1.0, ("3", "77", ""): 1.0}
    assert b"gpuscope_gpu_job_info" not in render(Snapshot(ts=T0, gpus=gpus, ports=ports)), "no attribution: no family"
