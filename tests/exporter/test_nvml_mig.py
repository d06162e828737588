"""MIG: per GPU-instance readings, the parent GPU's own readings kept, what NVML refuses in MIG mode
(utilisation, remapped rows; memory and processes without privileges), and what Prometheus sees."""

from __future__ import annotations

import pynvml
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuscope.exporter.exposition import ExporterIdentity, Exposition, NameSets
from gpuscope.exporter.snapshot import JobInfo, Snapshot
from gpuscope.exporter.sources.nvml import SLOW_EVERY, NvmlSource
from gpuscope.exporter.sources.nvml_mig import profile_from_attributes
from gpuscope.exporter.testing.fake_nvml import GIB, FakeGpu, h100_node, make_fake_pynvml, mig_layout

IDENTITY = ExporterIdentity("c", "r", "node-7", "nvml", "test")


def mig_node(privileged: bool = True) -> list[FakeGpu]:
    gpus = h100_node(2)
    mig_layout(gpus[1], ["3g.40gb", "1g.10gb", "1g.10gb"])
    gpus[1].privileged = privileged
    for pid, mig in zip((100, 200, 300), gpus[1].mig_devices, strict=True):
        mig.processes = [pid]
        mig.fb_used = pid * 2**20
    gpus[1].mig_devices[2].gpm_sm_util = 12.0
    return gpus


def read_twice(source: NvmlSource) -> list:
    source.read(0.0)  # GPM needs two samples before it reports
    return list(source.read(1.0)[0])


def test_the_fake_refuses_what_nvml_refuses_in_mig_mode() -> None:
    gpus = mig_node(privileged=False)
    fake = make_fake_pynvml(gpus)
    fake.nvmlInit()
    parent = fake.nvmlDeviceGetHandleByIndex(1)
    assert fake.nvmlDeviceGetMigMode(parent) == [pynvml.NVML_DEVICE_MIG_ENABLE] * 2
    for call, error in (
        (fake.nvmlDeviceGetUtilizationRates, pynvml.NVMLError_NotSupported),
        (fake.nvmlDeviceGetRemappedRows, pynvml.NVMLError_NotSupported),
        (fake.nvmlDeviceGetMemoryInfo, pynvml.NVMLError_NoPermission),
        (fake.nvmlDeviceGetComputeRunningProcesses, pynvml.NVMLError_NoPermission),
    ):
        with pytest.raises(error):
            call(parent)
    mig = fake.nvmlDeviceGetMigDeviceHandleByIndex(parent, 1)
    assert fake.nvmlDeviceGetGpuInstanceId(mig) == 2 and fake.nvmlDeviceGetName(mig).endswith("MIG 1g.10gb")
    assert fake.nvmlDeviceGetMemoryInfo(mig, version=pynvml.nvmlMemory_v2).used == 200 * 2**20
    assert [p.pid for p in fake.nvmlDeviceGetComputeRunningProcesses(mig)] == [200]
    with pytest.raises(pynvml.NVMLError_NotFound):
        fake.nvmlDeviceGetMigDeviceHandleByIndex(parent, 3)


def test_each_gpu_instance_is_read_and_the_parent_keeps_power_and_temperature() -> None:
    gpus = mig_node()
    source = NvmlSource(make_fake_pynvml(gpus), xid_events=False)
    whole, parent = read_twice(source)
    assert whole.mig == ()
    assert [(m.gpu_instance_id, m.compute_instance_id, m.profile) for m in parent.mig] == [
        (1, 0, "3g.40gb"),
        (2, 0, "1g.10gb"),
        (3, 0, "1g.10gb"),
    ]
    assert [m.uuid for m in parent.mig] == [m.uuid for m in gpus[1].mig_devices]
    third = parent.mig[2].values
    assert third["mig_fb_used_bytes"] == 300 * 2**20 and third["mig_fb_total_bytes"] == 10_035 * 2**20
    assert third["mig_sm_active_pct"] == 12.0 and third["mig_tensor_active_pct"] == 21.0
    assert parent.values["power_w"] == 612.0 and parent.values["temp_c"] == 71
    assert "util_pct" not in parent.values, "NVML has no utilisation for a MIG-enabled GPU"
    assert whole.values["util_pct"] == 97
    source.close()


def test_without_privileges_memory_and_processes_come_from_the_instances() -> None:
    gpus = mig_node(privileged=False)
    source = NvmlSource(make_fake_pynvml(gpus), xid_events=False)
    parent = read_twice(source)[1]
    assert parent.values["fb_used_bytes"] == (100 + 200 + 300) * 2**20, "the instances' sum"
    assert sorted(source.running_pids(1)) == [100, 200, 300], "job attribution keeps working"
    assert source.mig_running_pids(1) == {m.uuid: m.processes for m in gpus[1].mig_devices}
    assert source.mig_running_pids(0) == {}
    source.close()


def test_leaving_mig_mode_brings_utilisation_and_remapped_rows_back() -> None:
    gpus = mig_node()
    source = NvmlSource(make_fake_pynvml(gpus), xid_events=False)
    assert "util_pct" not in read_twice(source)[1].values
    gpus[1].mig_enabled = False
    readings = [source.read(float(t))[0][1] for t in range(2, 2 + 2 * SLOW_EVERY)]
    assert readings[-1].values["util_pct"] == 97, "not disabled until the exporter restarts"
    assert "remapped_rows_correctable" in readings[-1].values
    assert readings[-1].mig == ()
    source.close()


def test_profile_names_from_attributes_when_the_name_lacks_them() -> None:
    assert profile_from_attributes(gpu_slices=1, memory_mib=9_856, gpu_memory_bytes=80 * GIB) == "1g.10gb"
    assert profile_from_attributes(gpu_slices=7, memory_mib=80_896, gpu_memory_bytes=80 * GIB) == "7g.80gb"
    assert profile_from_attributes(gpu_slices=3, memory_mib=19_968, gpu_memory_bytes=None) == "3g.20gb"


def mig_snapshot() -> Snapshot:
    gpus = mig_node()
    source = NvmlSource(make_fake_pynvml(gpus), xid_events=False)
    readings = read_twice(source)
    source.close()
    jobs = {gpus[1].mig_devices[1].uuid: JobInfo("4711", "ada")}
    return Snapshot(ts=1.0, gpus=tuple(readings), ports=(), mig_jobs=jobs)


def test_native_metrics_per_gpu_instance() -> None:
    snapshot = mig_snapshot()
    body, _ = Exposition(IDENTITY, lambda: snapshot).render(None)
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    used = {s.labels["gpu_instance_id"]: s.value for s in families["gpuscope_mig_memory_used_bytes"].samples}
    assert used == {"1": 100 * 2**20, "2": 200 * 2**20, "3": 300 * 2**20}
    sample = families["gpuscope_mig_sm_active_ratio"].samples[2]
    assert sample.labels == {"gpu": "1", "uuid": snapshot.gpus[1].gpu.uuid, "gpu_instance_id": "3"}
    assert sample.value == pytest.approx(0.12)
    info = families["gpuscope_mig_info"].samples[1].labels
    assert info["profile"] == "1g.10gb" and info["mig_uuid"].startswith("MIG-") and info["compute_instance_id"] == "0"
    [job] = families["gpuscope_mig_job_info"].samples
    assert job.labels["job_id"] == "4711" and job.labels["gpu_instance_id"] == "2"


def test_dcgm_compat_labels_instances_as_dcgm_exporter_does() -> None:
    snapshot = mig_snapshot()
    body, _ = Exposition(IDENTITY, lambda: snapshot, NameSets(native=False, dcgm=True)).render(None)
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    fb_used = families["DCGM_FI_DEV_FB_USED"].samples
    by_instance = {(s.labels["gpu"], s.labels.get("GPU_I_ID")): s for s in fb_used}
    assert set(by_instance) == {("0", None), ("1", "1"), ("1", "2"), ("1", "3")}, "no GPU-wide figure beside them"
    assert by_instance[("1", "3")].labels["GPU_I_PROFILE"] == "1g.10gb"
    assert by_instance[("1", "3")].value == 300, "MiB"
    free = {
        s.labels.get("GPU_I_ID"): s.value for s in families["DCGM_FI_DEV_FB_FREE"].samples if s.labels["gpu"] == "1"
    }
    assert free["2"] == 10_035 - 200
    sm = {s.labels.get("GPU_I_ID"): s.value for s in families["DCGM_FI_PROF_SM_ACTIVE"].samples}
    assert sm["3"] == pytest.approx(0.12)
    assert "1" in {s.labels["gpu"] for s in families["DCGM_FI_DEV_POWER_USAGE"].samples}, "the parent's power"
