"""CPX/DPX partitions of an MI300X: one reading each, named as partitions of one GPU (defect 10)."""

from __future__ import annotations

import pytest

from gpuscope.exporter.sources.amdsmi import AmdSmiSource
from gpuscope.exporter.testing.fake_amdsmi import VERSIONS, make_fake_amdsmi, mi300x_node

DEVICE_WIDE = {"power_w", "power_limit_w", "energy_j", "temp_c", "mem_temp_c", "ecc_corrected", "nvlink_tx_bytes"}


@pytest.mark.parametrize("version", VERSIONS)
def test_partitions_share_the_gpus_bus_and_are_numbered(version: str) -> None:
    gpus = mi300x_node(2, partitions=8)  # every GPU's partition 0, then every GPU's partition 1, ...
    source = AmdSmiSource(make_fake_amdsmi(gpus, version=version))
    readings = source.read(0.0)[0]
    assert len(readings) == 16 and [r.gpu.index for r in readings] == list(range(16))
    assert len({r.gpu.uuid for r in readings}) == 16, "the library gives every partition the GPU's UUID"
    for gpu, reading in zip(gpus, readings, strict=True):
        assert reading.gpu.pci_bus_id == gpu.bdf, "the physical GPU's bus"
        assert reading.gpu.uuid == f"{gpu.uuid}:p{gpu.partition_id}"
    assert [d.partition for d in source.devices] == [g.partition_id for g in gpus]


def test_partition_numbers_are_the_librarys_where_it_reports_them() -> None:
    """From 6.3 amdsmi_get_gpu_kfd_info says which partition a handle is, whatever order they come in."""
    gpus = list(reversed(mi300x_node(1, partitions=4)))
    source = AmdSmiSource(make_fake_amdsmi(gpus, version="6.3"))
    assert [d.partition for d in source.devices] == [3, 2, 1, 0]
    assert [r.gpu.uuid[-3:] for r in source.read(0.0)[0]] == [":p3", ":p2", ":p1", ":p0"]


def test_device_wide_values_come_from_partition_0_only() -> None:
    """So a node's power or an XGMI total counts each GPU once, not once per partition."""
    gpus = mi300x_node(2, partitions=4)
    readings = AmdSmiSource(make_fake_amdsmi(gpus)).read(0.0)[0]
    for gpu, reading in zip(gpus, readings, strict=True):
        present = DEVICE_WIDE & set(reading.values)
        assert present == (DEVICE_WIDE if gpu.partition_id == 0 else set()), gpu.partition_id
        assert reading.values["util_pct"] == 95 and reading.values["fb_used_bytes"] > 0
        assert bool(reading.links) == (gpu.partition_id == 0)
    assert sum(r.values.get("power_w", 0) for r in readings) == 2 * 640


def test_whole_gpus_keep_their_identity() -> None:
    gpus = mi300x_node(2)
    source = AmdSmiSource(make_fake_amdsmi(gpus))
    assert [r.gpu.uuid for r in source.read(0.0)[0]] == [g.uuid for g in gpus]
    assert [d.partition for d in source.devices] == [None, None]
