"""NVLink: error counters supported or not per counter, ECC data per link, and GPU totals that never
go backwards (which Prometheus would read as a counter reset)."""

from __future__ import annotations

import pynvml

from gpuscope.exporter.sources.nvml import SLOW_EVERY, NvmlSource
from gpuscope.exporter.testing.fake_nvml import FakeGpu, make_fake_pynvml


def hopper(**kwargs: object) -> FakeGpu:
    gpu = FakeGpu(uuid="GPU-h", **kwargs)  # type: ignore[arg-type]
    assert gpu.nvlink_counters_unsupported == {pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA}, "as Hopper reports"
    return gpu


def slow_cycle(source: NvmlSource, t: int) -> list:
    """A reading taken on a slow cycle (error counters are read every SLOW_EVERY cycles)."""
    for i in range(SLOW_EVERY):
        readings = source.read(float(t * SLOW_EVERY + i))[0]
        if i == 0:
            first = readings
    return list(first)


def test_an_unsupported_crc_data_counter_leaves_the_other_counters() -> None:
    errors = {
        pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: 3,
        pynvml.NVML_NVLINK_ERROR_DL_REPLAY: 2,
        pynvml.NVML_NVLINK_ERROR_DL_RECOVERY: 1,
    }
    source = NvmlSource(make_fake_pynvml([hopper(nvlink_errors=errors)]), xid_events=False)
    [reading] = slow_cycle(source, 0)
    assert reading.values["nvlink_crc_errors"] == 3 * 18, "flit CRC errors, though data CRC is unsupported"
    assert reading.values["nvlink_replay_errors"] == 2 * 18
    assert reading.values["nvlink_recovery_errors"] == 1 * 18
    assert reading.links[5]["link_crc_errors"] == 3 and reading.links[5]["link_replay_errors"] == 2
    source.close()


def test_ecc_data_errors_are_read_per_link() -> None:
    gpu = hopper(nvlink_errors={pynvml.NVML_NVLINK_ERROR_DL_ECC_DATA: 7})
    fake = make_fake_pynvml([gpu])
    source = NvmlSource(fake, xid_events=False)
    [reading] = slow_cycle(source, 0)
    assert {link["link_ecc_errors"] for link in reading.links.values()} == {7}
    assert len(reading.links) == 18
    source.close()


def test_an_unsupported_counter_is_not_asked_again_but_the_others_are() -> None:
    fake = make_fake_pynvml([hopper()])
    source = NvmlSource(fake, xid_events=False)
    slow_cycle(source, 0)
    asked = fake.calls["nvmlDeviceGetNvLinkErrorCounter"]
    slow_cycle(source, 1)
    kinds_answering = 4  # replay, recovery, CRC flit, ECC data (CRC data is not supported)
    assert fake.calls["nvmlDeviceGetNvLinkErrorCounter"] - asked == 18 * kinds_answering
    source.close()


def test_a_link_failing_once_keeps_its_counters_for_later() -> None:
    gpu = hopper(nvlink_errors={pynvml.NVML_NVLINK_ERROR_DL_REPLAY: 4})
    source = NvmlSource(make_fake_pynvml([gpu]), xid_events=False)
    slow_cycle(source, 0)
    gpu.failing_links = {2}
    [failing] = slow_cycle(source, 1)
    assert "link_replay_errors" not in failing.links.get(2, {}), "a failed read drops that value"
    assert failing.values["nvlink_replay_errors"] == 4 * 18, "the total keeps link 2's last count"
    gpu.failing_links = set()
    [healed] = slow_cycle(source, 2)
    assert healed.links[2]["link_replay_errors"] == 4, "one failure does not disable the counter"
    source.close()


def test_throughput_totals_are_nvml_aggregates() -> None:
    gpu = hopper()
    fake = make_fake_pynvml([gpu])
    source = NvmlSource(fake, xid_events=False)
    expected = sum(gpu.nvlink_tx_kib + link for link in range(18)) * 1024
    assert source.read(0.0)[0][0].values["nvlink_tx_bytes"] == expected
    gpu.failing_links = {3}
    reading = source.read(1.0)[0][0]
    assert 3 not in reading.links or "link_tx_bytes" not in reading.links[3]
    assert reading.values["nvlink_tx_bytes"] == expected, "NVML's sum over all links (scopeId UINT_MAX)"
    source.close()


def test_throughput_totals_never_go_back_without_nvml_aggregates() -> None:
    gpu = hopper(unsupported={"nvlink_aggregate"})  # a driver without the UINT_MAX scope
    source = NvmlSource(make_fake_pynvml([gpu]), xid_events=False)
    before = source.read(0.0)[0][0].values
    gpu.failing_links = {3}
    after = source.read(1.0)[0][0].values
    assert after["nvlink_tx_bytes"] >= before["nvlink_tx_bytes"]
    assert after["nvlink_rx_bytes"] >= before["nvlink_rx_bytes"]
    source.close()
