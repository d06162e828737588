"""Each amdsmi release's return shapes and units read as the same catalog values (defect 9)."""

from __future__ import annotations

import pytest

from gpuscope.exporter.sources.amdsmi import AmdSmiSource, plausible_watts
from gpuscope.exporter.testing.fake_amdsmi import VERSIONS, FakeAmdGpu, make_fake_amdsmi


@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_reads_the_same_values(version: str) -> None:
    gpu = FakeAmdGpu(uuid="amd-0", energy_accumulator=1_000_000, energy_resolution_uj=15.0)
    smi = make_fake_amdsmi([gpu], version=version)
    [reading] = AmdSmiSource(smi).read(0.0)[0]
    v = reading.values
    assert v["power_w"] == 640
    assert v["power_limit_w"] == 750, "6.2 and 6.3 report hwmon's power1_cap in µW"
    assert v["energy_j"] == pytest.approx(15.0), "'power' in 6.2, 'energy_accumulator' from 6.3"
    assert len(reading.links) == 7 and reading.links[2]["link_rx_bytes"] == (5_000_000 + 2) * 1024
    assert v["nvlink_tx_bytes"] == sum(link["link_tx_bytes"] for link in reading.links.values())


def test_the_fake_offers_each_versions_shape() -> None:
    """So the test above exercises what differs, not one shape four times."""
    gpu = FakeAmdGpu(uuid="amd-0")
    shapes = {}
    for version in VERSIONS:
        smi = make_fake_amdsmi([gpu], version=version)
        smi.amdsmi_init()
        [h] = smi.amdsmi_get_processor_handles()
        energy, power = smi.amdsmi_get_energy_count(h), smi.amdsmi_get_power_info(h)
        shapes[version] = (
            sorted(k for k in energy if k in ("power", "energy_accumulator")),
            power["power_limit"],
            power.get("socket_power"),
            hasattr(smi, "amdsmi_get_link_metrics"),
        )
    assert shapes == {
        "6.2": (["power"], 750_000_000, None, False),
        "6.3": (["energy_accumulator", "power"], 750_000_000, None, False),
        "6.4": (["energy_accumulator"], 750, "N/A", True),
        "7.0": (["energy_accumulator"], 750, 640, True),
    }


@pytest.mark.parametrize(
    ("raw", "watts"),
    [
        (750, 750.0),  # W, as 6.4+ report it
        (750_000_000, 750.0),  # µW, hwmon power1_cap as 6.2/6.3 report it
        (10_000, 10_000.0),  # the largest value taken as W
        (10_001, None),  # µW of a 0.01 W cap: no real GPU, so dropped
        (25_000_000_000, None),  # 25 kW even as µW: dropped
        (0, 0.0),
        (-5, None),
    ],
)
def test_power_unit_rule(raw: int, watts: float | None) -> None:
    assert plausible_watts(raw) == watts


def test_implausible_power_limit_is_left_out() -> None:
    gpu = FakeAmdGpu(uuid="amd-0", power_limit_w=5)  # 5_000_000 µW in 6.2: 5 W, plausible
    assert AmdSmiSource(make_fake_amdsmi([gpu], version="6.2")).read(0.0)[0][0].values["power_limit_w"] == 5
    gpu = FakeAmdGpu(uuid="amd-0", power_limit_w=50_000)  # 50 kW in 7.0: not a GPU's
    assert "power_limit_w" not in AmdSmiSource(make_fake_amdsmi([gpu])).read(0.0)[0][0].values
