"""PCIe throughput off the hot path: nvmlDeviceGetPcieThroughput samples for 20 ms per call, so the
sampling loop reads NVML's byte counters (driver 555+) or values a thread of its own measured."""

from __future__ import annotations

import time

import pytest

from gpuscope.exporter.sources.nvml import NvmlSource
from gpuscope.exporter.testing.fake_nvml import h100_node, make_fake_pynvml
from tests.waiting import eventually


def test_the_fake_samples_pcie_throughput_for_20ms_like_the_driver() -> None:
    fake = make_fake_pynvml(h100_node(1))
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    started = time.perf_counter()
    assert fake.nvmlDeviceGetPcieThroughput(handle, fake.NVML_PCIE_UTIL_TX_BYTES) == 1_200_000
    assert time.perf_counter() - started >= 0.020


def test_pcie_rates_come_from_byte_counters_without_the_20ms_call() -> None:
    gpus = h100_node(8)
    fake = make_fake_pynvml(gpus)
    source = NvmlSource(fake, xid_events=False)
    source.read(0.0)
    time.sleep(0.05)
    started = time.perf_counter()
    readings = source.read(1.0)[0]
    assert time.perf_counter() - started < 0.1
    assert "nvmlDeviceGetPcieThroughput" not in fake.calls
    assert readings[0].values["pcie_tx_bytes_per_s"] == pytest.approx(1_200_000 * 1024, rel=1e-3)
    assert readings[7].values["pcie_rx_bytes_per_s"] == pytest.approx(900_000 * 1024, rel=1e-3)
    source.close()


def test_without_byte_counters_the_sampling_cycle_stays_short() -> None:
    gpus = h100_node(8)
    for gpu in gpus:
        gpu.unsupported.add("pcie_counters")  # a driver older than 555
    fake = make_fake_pynvml(gpus)
    source = NvmlSource(fake, xid_events=False)
    try:
        walls = []
        for t in range(5):
            started = time.perf_counter()
            source.read(float(t))
            walls.append(time.perf_counter() - started)
        assert max(walls) < 0.050, f"8 GPUs x 2 calls x 20 ms stay off the sampling loop: {walls}"
        reading = eventually(
            lambda: source.read(9.0)[0][7].values.get("pcie_tx_bytes_per_s"), what="PCIe throughput of GPU 7"
        )
        assert reading == 1_200_000 * 1024
    finally:
        source.close()
    calls = fake.calls["nvmlDeviceGetPcieThroughput"]
    time.sleep(0.1)
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == calls, "close() stops the throughput thread"


def test_a_gpu_without_pcie_throughput_has_none() -> None:
    gpus = h100_node(1)
    gpus[0].unsupported |= {"pcie_counters", "pcie_throughput"}
    source = NvmlSource(make_fake_pynvml(gpus), xid_events=False)
    try:
        time.sleep(0.1)
        assert "pcie_tx_bytes_per_s" not in source.read(0.0)[0][0].values
    finally:
        source.close()
