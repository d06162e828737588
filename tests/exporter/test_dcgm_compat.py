"""--dcgm-compat as a drop-in for dcgm-exporter: its default counters with its types and units, its
labels (MIG, driver version, HPC job), beside gpuscope's own names on the same scrape unless asked
otherwise. (A real Prometheus running dcgm-exporter's dashboard queries: test_dcgm_dropin.py.)"""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from gpuscope.exporter.exposition import ExporterIdentity, Exposition, NameSets
from gpuscope.exporter.snapshot import JobInfo, Snapshot
from gpuscope.exporter.sources.nvml import NvmlSource
from gpuscope.exporter.testing.fake_nvml import h100_node, make_fake_pynvml
from gpuscope.exporter.testing.fake_nvml_gpus import FakeGpu
from gpuscope.exporter.textformat import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE

IDENTITY = ExporterIdentity("c", "r", "node-7", "nvml", "test")
DCGM_ONLY = NameSets(native=False, dcgm=True)
MIB = 2**20


def snapshot_of(gpus: list[FakeGpu], *, xids: dict[int, int] | None = None, jobs: bool = False) -> Snapshot:
    source = NvmlSource(make_fake_pynvml(gpus), xid_events=False)
    source.read(0.0)
    readings = list(source.read(1.0)[0])
    if xids:
        first = readings[0]
        readings[0] = type(first)(first.gpu, True, first.values, first.links, xids)
    job_map = {0: JobInfo("4242", "ada")} if jobs else None
    return Snapshot(ts=1.0, gpus=tuple(readings), ports=(), jobs=job_map, driver_version=source.driver_version)


def scrape(snapshot: Snapshot, names: NameSets = DCGM_ONLY, accept: str | None = None) -> dict[str, object]:
    body, content_type = Exposition(IDENTITY, lambda: snapshot, names).render(accept)
    assert content_type == TEXT_CONTENT_TYPE, "dcgm-exporter's names are served as text: its counters lack _total"
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def first(families: dict[str, object], name: str) -> Sample:
    return families[name].samples[0]  # type: ignore[attr-defined, no-any-return]


def test_the_default_counters_have_dcgm_exporters_types_and_units() -> None:
    gpus = h100_node(2)
    gpus[0].power_violation_ns, gpus[0].thermal_violation_ns = 7_000_000_000, 2_500_000_000
    gpus[0].pcie_replay = 3
    gpus[0].remapped_rows = (2, 1, 0, 0)
    snapshot = snapshot_of(gpus)
    families = scrape(snapshot)
    body = Exposition(IDENTITY, lambda: snapshot, DCGM_ONLY).render(None)[0].decode()
    types = {name: family.type for name, family in families.items()}  # type: ignore[attr-defined]
    for counter in (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_DEV_POWER_VIOLATION",
        "DCGM_FI_DEV_THERMAL_VIOLATION",
    ):
        assert types[counter] == "counter", counter
        assert f"\n{counter}{{gpu=" in body, "no _total: dashboards query the bare name"
        assert f"\n# TYPE {counter} counter\n" in body
    for gauge in ("DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_FB_RESERVED"):
        assert types[gauge] == "gauge", gauge
    assert first(families, "DCGM_FI_DEV_POWER_VIOLATION").value == 7_000_000_000, "nanoseconds, as DCGM"
    assert first(families, "DCGM_FI_DEV_THERMAL_VIOLATION").value == 2_500_000_000
    assert first(families, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER").value == 3
    assert first(families, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS").value == 2
    assert first(families, "DCGM_FI_DEV_DEC_UTIL").value == 3, "percent"
    assert first(families, "DCGM_FI_DEV_FB_RESERVED").value == 512, "MiB"
    used, free = first(families, "DCGM_FI_DEV_FB_USED").value, first(families, "DCGM_FI_DEV_FB_FREE").value
    assert used + free == 80 * 1024 - 512, "free leaves out the reserve, as DCGM's does"
    assert first(families, "DCGM_FI_PROF_GR_ENGINE_ACTIVE").value == pytest.approx(0.96), "a ratio"
    assert first(families, "DCGM_FI_PROF_DRAM_ACTIVE").value == pytest.approx(0.38)
    tx = first(families, "DCGM_FI_PROF_PCIE_TX_BYTES").value
    assert tx == pytest.approx(1_200_000 * 1024, rel=0.05), "bytes per second"
    links = 18
    nvlink = first(families, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL").value
    assert nvlink == sum((10_000_000 + 9_000_000 + 2 * link) * 1024 for link in range(links)), "tx + rx bytes"
    assert first(families, "DCGM_FI_DEV_VGPU_LICENSE_STATUS").value == 0, "bare metal"


def test_flit_crc_errors_are_not_mixed_with_data_crc_errors() -> None:
    gpus = h100_node(1)
    gpus[0].nvlink_counters_unsupported = set()
    make = make_fake_pynvml(gpus)
    gpus[0].nvlink_errors = {make.NVML_NVLINK_ERROR_DL_CRC_FLIT: 2, make.NVML_NVLINK_ERROR_DL_CRC_DATA: 5}
    families = scrape(snapshot_of(gpus))
    assert first(families, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL").value == 2 * 18
    assert first(families, "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL").value == 5 * 18


def test_the_clock_event_bitmask_under_both_of_dcgms_names_and_one_series_per_reason_natively() -> None:
    gpus = h100_node(1)
    gpus[0].clocks_event_reasons = 0x4 | 0x40  # power cap and hardware thermal slowdown
    snapshot = snapshot_of(gpus)
    families = scrape(snapshot, NameSets(dcgm=True))
    assert first(families, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS").value == 0x44
    assert first(families, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS").value == 0x44
    active = {s.labels["reason"]: s.value for s in families["gpuscope_gpu_clock_event_active"].samples}  # type: ignore[attr-defined]
    assert active["sw_power_cap"] == 1 and active["hw_thermal_slowdown"] == 1
    assert sum(active.values()) == 2 and len(active) == 9
    assert "gpuscope_gpu_clock_event_reasons" not in families, "no bitmask arithmetic in native rules"


def test_the_last_xid_is_dcgms_xid_field() -> None:
    families = scrape(snapshot_of(h100_node(2), xids={79: 1, 13: 4, 48: 1}))
    values = {s.labels["gpu"]: s.value for s in families["DCGM_FI_DEV_XID_ERRORS"].samples}  # type: ignore[attr-defined]
    assert values == {"0": 48, "1": 0}, "the XID seen last; 0 before any"


def test_labels_driver_version_and_hpc_job() -> None:
    families = scrape(snapshot_of(h100_node(2), jobs=True))
    with_job, without = families["DCGM_FI_DEV_GPU_UTIL"].samples  # type: ignore[attr-defined]
    assert with_job.labels["hpc_job"] == "4242" and "hpc_job" not in without.labels
    assert with_job.labels["DCGM_FI_DRIVER_VERSION"] == "570.124.06"
    assert with_job.labels["Hostname"] == with_job.labels["hostname"] == "node-7"
    assert with_job.labels["UUID"].startswith("GPU-") and with_job.labels["device"] == "nvidia0"


def test_native_names_are_served_beside_unless_compat_only() -> None:
    snapshot = snapshot_of(h100_node(1))
    both = scrape(snapshot, NameSets(dcgm=True))
    assert "DCGM_FI_DEV_GPU_UTIL" in both and "gpuscope_gpu_utilization_ratio" in both
    only = scrape(snapshot, DCGM_ONLY)
    assert "DCGM_FI_DEV_GPU_UTIL" in only and not any(n.startswith("gpuscope_") for n in only)
    native = Exposition(IDENTITY, lambda: snapshot).render(OPENMETRICS_CONTENT_TYPE)
    assert native[1] == OPENMETRICS_CONTENT_TYPE, "gpuscope's own names alone still speak OpenMetrics"
    scrape(snapshot, NameSets(dcgm=True), accept=OPENMETRICS_CONTENT_TYPE)  # asserts text is served
    with pytest.raises(ValueError, match="compat names only"):
        NameSets(native=False)


def test_the_exporter_info_leaves_cluster_and_rack_to_the_target_labels() -> None:
    families = scrape(snapshot_of(h100_node(1)), NameSets(dcgm=True))
    labels = first(families, "gpuscope_exporter_info").labels
    assert labels["exporter_cluster"] == "c" and labels["exporter_rack"] == "r"
    assert "cluster" not in labels and "rack" not in labels, "file_sd's cluster/rack would become exported_*"


def test_a_lost_gpu_is_left_out_not_zeroed() -> None:
    gpus = h100_node(2)
    snapshot = snapshot_of(gpus)
    gpus[1].lost = True
    source_snapshot = snapshot_of(gpus)
    families = scrape(source_snapshot)
    assert {s.labels["gpu"] for s in families["DCGM_FI_DEV_GPU_TEMP"].samples} == {"0"}  # type: ignore[attr-defined]
    assert len(snapshot.gpus) == 2


def test_one_vendors_gpus_are_never_served_under_the_others_names() -> None:
    from types import SimpleNamespace

    from gpuscope.exporter_process import _check_names_fit

    with pytest.raises(ValueError, match="use --amd-compat"):
        _check_names_fit(NameSets(dcgm=True), SimpleNamespace(name="amdsmi+infiniband"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="use --dcgm-compat"):
        _check_names_fit(NameSets(amd=True), SimpleNamespace(name="nvml"))  # type: ignore[arg-type]
    _check_names_fit(NameSets(dcgm=True, amd=True), SimpleNamespace(name="sim"))  # type: ignore[arg-type]
