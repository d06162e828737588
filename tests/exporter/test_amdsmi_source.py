"""The AMD backend against the fake amdsmi: units, "N/A" and NOT_SUPPORTED, a GPU that stops answering."""

from __future__ import annotations

import pytest

from gpuscope.exporter.sources.amdsmi import AmdSmiSource, load_amdsmi
from gpuscope.exporter.sources.base import BackendUnavailable
from gpuscope.exporter.testing.fake_amdsmi import FakeAmdGpu, make_fake_amdsmi, mi300x_node


def test_values_in_catalog_units_with_xgmi_as_links() -> None:
    gpu = FakeAmdGpu(uuid="amd-0", energy_accumulator=1_000_000, energy_resolution_uj=15.0)
    [reading] = AmdSmiSource(make_fake_amdsmi([gpu])).read(0.0)[0]
    v = reading.values
    assert (v["util_pct"], v["mem_copy_util_pct"], v["power_w"], v["power_limit_w"]) == (95, 40, 640, 750)
    assert v["energy_j"] == pytest.approx(15.0), "accumulator x resolution (µJ)"
    assert (v["temp_c"], v["mem_temp_c"], v["sm_clock_mhz"], v["mem_clock_mhz"]) == (74, 68, 2100, 1300)
    assert v["fb_total_bytes"] == 192 * 2**30 and v["ecc_corrected"] == 0
    assert len(reading.links) == 7 and reading.links[2]["link_tx_bytes"] == (6_000_000 + 2) * 1024
    assert v["nvlink_tx_bytes"] == sum(link["link_tx_bytes"] for link in reading.links.values())
    assert reading.gpu.model == "AMD Instinct MI300X" and reading.gpu.pci_bus_id == "0000:05:00.0"


def test_na_and_not_supported_are_absent() -> None:
    gpus = mi300x_node(2)
    gpus[1].unsupported = {"power", "vram_temp", "xgmi", "ecc"}
    full, lacking = AmdSmiSource(make_fake_amdsmi(gpus)).read(0.0)[0]
    assert set(full.values) - set(lacking.values) == {
        "power_w",
        "power_limit_w",
        "mem_temp_c",
        "nvlink_tx_bytes",
        "nvlink_rx_bytes",
        "ecc_corrected",
        "ecc_uncorrected",
    }
    assert lacking.links == {}


def test_gpu_that_stops_answering_is_down_while_others_report() -> None:
    gpus = mi300x_node(3)
    source = AmdSmiSource(make_fake_amdsmi(gpus))
    gpus[2].lost = True
    readings = source.read(0.0)[0]
    assert [r.up for r in readings] == [True, True, False]
    gpus[2].lost = False
    assert source.read(1.0)[0][2].up


def test_no_driver_is_a_clear_error() -> None:
    with pytest.raises(BackendUnavailable, match="amdgpu driver"):
        AmdSmiSource(make_fake_amdsmi(mi300x_node(1), driver=False))


def test_missing_rocm_library_is_a_clear_error() -> None:
    def import_without_rocm(name: str):  # type: ignore[no-untyped-def]
        raise KeyError("libamd_smi.so")  # what `import amdsmi` does without ROCm (REFERENCE.md section 3)

    with pytest.raises(BackendUnavailable, match="is ROCm installed"):
        load_amdsmi(import_without_rocm)


def test_missing_package_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """amdsmi is not installed here: the real import fails the same way. The wrapper must be ROCm's own."""
    monkeypatch.delenv("ROCM_PATH", raising=False)
    with pytest.raises(BackendUnavailable, match=r"not installed: .*pip install /opt/rocm/share/amd_smi"):
        load_amdsmi()
