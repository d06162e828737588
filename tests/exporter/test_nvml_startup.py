"""Start-up: one GPU that cannot be opened (no permission, fallen off the bus) never stops the others."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gpuscope.exporter.sources.nvml import SLOW_EVERY, NvmlSource
from gpuscope.exporter.sources.select import open_source
from gpuscope.exporter.testing.fake_nvml import h100_node, make_fake_pynvml


def test_a_gpu_without_permission_is_down_and_the_others_report(caplog: pytest.LogCaptureFixture) -> None:
    gpus = h100_node(4)
    gpus[2].no_permission = True  # counted by nvmlDeviceGetCount, refused by nvmlDeviceGetHandleByIndex
    with caplog.at_level(logging.WARNING):
        source = NvmlSource(make_fake_pynvml(gpus), xid_events=False)
    readings = source.read(0.0)[0]
    assert [r.up for r in readings] == [True, True, False, True]
    assert [r.gpu.index for r in readings] == [0, 1, 2, 3]
    assert readings[1].values["power_w"] > 0 and readings[2].values == {}
    assert any("GPU 2" in m and "Insufficient Permissions" in m for m in caplog.messages), caplog.messages
    source.close()


def test_a_gpu_lost_before_start_is_down_and_joins_when_it_answers(caplog: pytest.LogCaptureFixture) -> None:
    gpus = h100_node(3)
    gpus[0].lost = True  # its handle is given, but the UUID and PCI lookups answer GPU_IS_LOST
    fake = make_fake_pynvml(gpus)
    with caplog.at_level(logging.WARNING):
        source = NvmlSource(fake, xid_events=False)
    first = source.read(0.0)[0]
    assert [r.up for r in first] == [False, True, True]
    assert first[0].gpu.uuid != gpus[0].uuid and first[0].gpu.index == 0
    assert any("GPU 0" in m and "GPU is lost" in m for m in caplog.messages), caplog.messages
    gpus[0].lost = False
    later = [source.read(float(t))[0][0] for t in range(1, SLOW_EVERY + 1)]
    assert later[-1].up and later[-1].gpu.uuid == gpus[0].uuid, "retried on the slow cadence"
    assert source.gpus[0].uuid == gpus[0].uuid
    source.close()


def test_auto_backend_serves_the_healthy_gpus_when_one_is_refused(tmp_path: Path) -> None:
    gpus = h100_node(8)
    gpus[5].no_permission = True
    gpus[6].lost = True
    source = open_source("auto", tmp_path / "no-ib", {"nvml": lambda: NvmlSource(make_fake_pynvml(gpus), False)})
    readings, _ = source.read(0.0)
    assert sum(r.up for r in readings) == 6 and len(readings) == 8
    source.close()


def test_a_gpu_that_cannot_be_opened_has_no_processes() -> None:
    gpus = h100_node(2)
    gpus[0].no_permission = True
    gpus[1].processes = [4242]
    source = NvmlSource(make_fake_pynvml(gpus), xid_events=False)
    assert source.running_pids(0) == [] and source.running_pids(1) == [4242]
    source.close()
