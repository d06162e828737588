"""What Prometheus sees: promtool finds nothing to report, and --dcgm-compat speaks dcgm-exporter."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuscope.exporter.exposition import ExporterIdentity, Exposition, NameSets
from gpuscope.exporter.sim import JobSchedule, SimNodeSource, build_topology
from gpuscope.exporter.snapshot import Snapshot
from gpuscope.exporter.sources.amdsmi import AmdSmiSource
from gpuscope.exporter.sources.combined import CombinedSource
from gpuscope.exporter.sources.infiniband import InfinibandSource
from gpuscope.exporter.sources.nvml import NvmlSource
from gpuscope.exporter.testing.fake_amdsmi import make_fake_amdsmi, mi300x_node
from gpuscope.exporter.testing.fake_nvml import h100_node, make_fake_pynvml
from tests.conftest import require_tool

IB_ROOT = Path(__file__).resolve().parent.parent / "data" / "sys" / "class" / "infiniband"
IDENTITY = ExporterIdentity("c", "r", "node-7", "nvml+infiniband", "test")


def nvml_snapshot() -> Snapshot:
    gpus = h100_node(4)
    gpus[1].unsupported = {"memory_temp", "gpm", "nvlink"}
    fake = make_fake_pynvml(gpus)
    source = CombinedSource(NvmlSource(fake, xid_events=False), InfinibandSource(IB_ROOT))
    source.read(0.0)
    gpus[3].lost = True
    readings, ports = source.read(1.0)
    readings = list(readings)
    readings[0] = type(readings[0])(readings[0].gpu, True, readings[0].values, readings[0].links, {79: 2, 13: 1})
    return Snapshot(ts=1.0, gpus=tuple(readings), ports=ports)


def amd_snapshot() -> Snapshot:
    gpus = mi300x_node(4)
    gpus[1].unsupported = {"power", "xgmi"}
    readings, _ = AmdSmiSource(make_fake_amdsmi(gpus)).read(1.0)
    return Snapshot(ts=1.0, gpus=readings, ports=())


def sim_snapshot() -> Snapshot:
    topology = build_topology(1, 8, 1)
    gpus, ports = SimNodeSource(topology[0], JobSchedule(topology, 1), 1).read(1_790_000_000.0)
    return Snapshot(ts=1_790_000_000.0, gpus=gpus, ports=ports)


def promtool_findings(body: bytes) -> tuple[int, list[str]]:
    promtool = require_tool("promtool")
    result = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=30, check=False)
    return result.returncode, (result.stdout + result.stderr).decode().splitlines()


@pytest.mark.parametrize("make", [nvml_snapshot, amd_snapshot, sim_snapshot], ids=["nvml", "amd", "sim"])
def test_promtool_check_metrics_reports_nothing(make) -> None:  # type: ignore[no-untyped-def]
    snapshot = make()
    body, _ = Exposition(IDENTITY, lambda: snapshot).render(None)
    assert promtool_findings(body) == (0, [])


@pytest.mark.parametrize("make", [nvml_snapshot, sim_snapshot], ids=["nvml", "sim"])
def test_promtool_on_dcgm_compat_finds_only_dcgms_own_names(make) -> None:  # type: ignore[no-untyped-def]
    """modelName, UUID, Hostname, DCGM_FI_DRIVER_VERSION, counters without _total (and
    DCGM_FI_DEV_PCIE_REPLAY_COUNTER) are dcgm-exporter's own names: promtool says the same of it."""
    snapshot = make()
    body, _ = Exposition(IDENTITY, lambda: snapshot, NameSets(native=False, dcgm=True)).render(None)
    _, findings = promtool_findings(body)
    assert findings, "promtool flags dcgm-exporter's camelCase labels, as it does on dcgm-exporter itself"
    dcgms_own = (
        "label names should be written in 'snake_case' not 'camelCase'",
        "_COUNTER metric name should not include type 'counter'",
        'counter metrics should have "_total" suffix',
    )
    assert all(line.endswith(dcgms_own) for line in findings), findings


def test_nvml_exposition_has_links_xids_and_lost_gpu() -> None:
    snapshot = nvml_snapshot()
    body, _ = Exposition(IDENTITY, lambda: snapshot).render(None)
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    xids = {(s.labels["gpu"], s.labels["xid"]): s.value for s in families["gpuscope_gpu_xid_errors"].samples}
    assert xids == {("0", "79"): 2, ("0", "13"): 1}
    links = families["gpuscope_nvlink_transmit_bytes"].samples
    assert {s.labels["gpu"] for s in links} == {"0", "2"}, "GPU 1 lacks NVLink, GPU 3 is lost"
    assert len(links) == 2 * 18
    up = {s.labels["gpu"]: s.value for s in families["gpuscope_gpu_up"].samples}
    assert up == {"0": 1, "1": 1, "2": 1, "3": 0}
    assert {s.labels["gpu"] for s in families["gpuscope_gpu_power_watts"].samples} == {"0", "1", "2"}


def test_dcgm_compat_names_labels_and_units() -> None:
    snapshot = nvml_snapshot()
    body, _ = Exposition(IDENTITY, lambda: snapshot, NameSets(native=False, dcgm=True)).render(None)
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    for name in (
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    ):
        assert name in families, name
    sample = families["DCGM_FI_DEV_FB_USED"].samples[0]
    assert set(sample.labels) == {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "hostname"}
    assert sample.labels["device"] == "nvidia0" and sample.labels["Hostname"] == "node-7"
    assert sample.value == 61 * 1024, "framebuffer in MiB, as DCGM reports it"
    assert families["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].samples[0].value == 9_000_000_000, "mJ"
    assert families["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"].samples[0].value == pytest.approx(0.57), "a ratio"
    assert families["DCGM_FI_DEV_SM_CLOCK"].samples[0].value == 1980, "MHz"
    assert not any(name.startswith("gpuscope_") for name in families), "compat names only"
