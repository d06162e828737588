"""The NVML backend against the fake pynvml: units, unsupported fields, lost GPUs, XIDs, GPM."""

from __future__ import annotations

import logging

import pynvml
import pytest

from gpuscope.exporter.sources.base import BackendUnavailable
from gpuscope.exporter.sources.nvml import SLOW_EVERY, NvmlSource
from gpuscope.exporter.testing.fake_nvml import FakeGpu, h100_node, make_fake_pynvml
from tests.waiting import eventually


def read_twice(source: NvmlSource) -> list:
    source.read(0.0)  # GPM needs two samples before it reports
    return list(source.read(1.0)[0])


def test_fake_uses_the_real_exception_classes() -> None:
    fake = make_fake_pynvml(h100_node(1))
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    fake.gpus[0].unsupported.add("energy")
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetTotalEnergyConsumption(h)


def test_values_arrive_in_catalog_units() -> None:
    gpu = FakeGpu(uuid="GPU-a", power_mw=612_500, energy_mj=9_000_000, power_violation_ns=2_500_000_000)
    source = NvmlSource(make_fake_pynvml([gpu]), xid_events=False)
    [reading] = read_twice(source)
    v = reading.values
    assert v["power_w"] == 612.5 and v["energy_j"] == 9000.0 and v["power_limit_w"] == 700.0
    assert v["throttle_power_s"] == 2.5
    assert v["sm_clock_mhz"] == 1980 and v["fb_total_bytes"] == 80 * 2**30
    assert v["pcie_tx_bytes_per_s"] == pytest.approx(1_200_000 * 1024, rel=1e-3), "from the byte counters"
    assert v["sm_active_pct"] == 83.0 and v["tensor_active_pct"] == 57.0
    assert v["mem_temp_c"] == 78
    assert len(reading.links) == 18 and reading.links[3]["link_tx_bytes"] == (10_000_000 + 3) * 1024
    assert v["nvlink_tx_bytes"] == sum(link["link_tx_bytes"] for link in reading.links.values())
    assert reading.gpu.pci_bus_id == "00000000:18:00.0" and reading.gpu.model.startswith("NVIDIA H100")
    source.close()


def test_unsupported_fields_are_absent_and_not_asked_again() -> None:
    gpus = h100_node(2)
    gpus[1].unsupported = {"memory_temp", "gpm", "nvlink", "ecc", "energy"}
    fake = make_fake_pynvml(gpus)
    source = NvmlSource(fake, xid_events=False)
    full, lacking = read_twice(source)
    missing = set(full.values) - set(lacking.values)
    assert missing == {
        "mem_temp_c",
        "sm_active_pct",
        "tensor_active_pct",
        "gr_engine_active_pct",
        "dram_active_pct",
        "nvlink_tx_bytes",
        "nvlink_rx_bytes",
        "nvlink_crc_errors",
        "nvlink_crc_flit_errors",
        "nvlink_replay_errors",
        "nvlink_recovery_errors",
        "ecc_corrected",
        "ecc_uncorrected",
        "energy_j",
    }
    assert lacking.links == {}
    asked = fake.calls["nvmlDeviceGetTotalEnergyConsumption"]
    for t in range(5):
        source.read(float(t))
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == asked + 5, "only the GPU that has it is asked"


def test_lost_gpu_is_down_while_the_others_report(caplog: pytest.LogCaptureFixture) -> None:
    gpus = h100_node(3)
    source = NvmlSource(make_fake_pynvml(gpus), xid_events=False)
    gpus[1].lost = True
    with caplog.at_level(logging.ERROR):
        for t in range(3):
            readings = source.read(float(t))[0]
    assert [r.up for r in readings] == [True, False, True]
    assert readings[1].values == {} and readings[0].values["power_w"] > 0
    assert sum("fell off the bus" in m for m in caplog.messages) == 1, "logged once, not every cycle"
    gpus[1].lost = False
    assert source.read(4.0)[0][1].up


def test_slow_counters_are_read_every_few_cycles_and_carried_over() -> None:
    gpus = h100_node(1)
    fake = make_fake_pynvml(gpus)
    source = NvmlSource(fake, xid_events=False)
    for t in range(SLOW_EVERY):
        assert source.read(float(t))[0][0].values["ecc_corrected"] == 0
    gpus[0].ecc_corrected = 5
    assert fake.calls["nvmlDeviceGetTotalEccErrors"] == 2
    assert source.read(99.0)[0][0].values["ecc_corrected"] == 5


def test_xid_events_are_counted_per_code() -> None:
    gpus = h100_node(2)
    fake = make_fake_pynvml(gpus)
    source = NvmlSource(fake)
    try:
        for xid in (79, 79, 48):
            fake.raise_xid(gpus[1], xid)
        eventually(lambda: sum(source.read(0.0)[0][1].xid_counts.values()) >= 3, timeout=5, what="the three XID events")
        readings = source.read(1.0)[0]
        assert readings[1].xid_counts == {79: 2, 48: 1}
        assert readings[0].xid_counts == {}
    finally:
        source.close()


@pytest.mark.parametrize(
    ("library", "driver", "needle"), [(False, True, "Library Not Found"), (True, False, "Driver Not Loaded")]
)
def test_missing_library_or_driver_is_a_clear_error(library: bool, driver: bool, needle: str) -> None:
    with pytest.raises(BackendUnavailable, match=needle) as raised:
        NvmlSource(make_fake_pynvml([], library=library, driver=driver))
    assert "NVIDIA driver" in str(raised.value)


def test_real_pynvml_without_a_driver_says_so() -> None:
    """On this machine there is no driver: the real binding must fail the same way the fake does."""
    with pytest.raises(BackendUnavailable, match="NVML Shared Library Not Found"):
        NvmlSource()
