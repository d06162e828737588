"""XID events: a GPU falling off the bus neither loses its own XID 79 nor silences the healthy GPUs."""

from __future__ import annotations

import logging
import time

import pynvml
import pytest

from gpuscope.exporter.snapshot import UNKNOWN_XID
from gpuscope.exporter.sources.nvml import NvmlSource
from gpuscope.exporter.testing.fake_nvml import h100_node, make_fake_pynvml
from tests.waiting import eventually


def xids(source: NvmlSource, index: int) -> dict[int, int]:
    return source.read(0.0)[0][index].xid_counts


def test_the_fake_answers_gpu_is_lost_from_the_event_wait() -> None:
    gpus = h100_node(2)
    fake = make_fake_pynvml(gpus)
    fake.nvmlInit()
    event_set = fake.nvmlEventSetCreate()
    for i in range(2):
        fake.nvmlDeviceRegisterEvents(
            fake.nvmlDeviceGetHandleByIndex(i), pynvml.nvmlEventTypeXidCriticalError, event_set
        )
    fake.lose(gpus[1])
    fake.raise_xid(gpus[0], 48)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        fake.nvmlEventSetWait(event_set, 10)


def test_xid_79_of_a_gpu_that_fell_off_the_bus_is_counted() -> None:
    gpus = h100_node(3)
    fake = make_fake_pynvml(gpus)
    source = NvmlSource(fake)
    try:
        gpus[1].lost = True
        fake.raise_xid(gpus[1], 79)
        eventually(lambda: xids(source, 1) == {79: 1}, what="XID 79 counted for GPU 1", timeout=5)
    finally:
        source.close()


def test_healthy_gpus_keep_reporting_xids_after_one_is_lost(caplog: pytest.LogCaptureFixture) -> None:
    gpus = h100_node(3)
    fake = make_fake_pynvml(gpus)
    source = NvmlSource(fake)
    try:
        with caplog.at_level(logging.WARNING):
            fake.lose(gpus[2])

            def counted() -> bool:
                fake.raise_xid(gpus[0], 48)  # raised until one arrives: a freed event set drops its own
                return xids(source, 0).get(48, 0) > 0

            eventually(counted, what="an XID of healthy GPU 0 after GPU 2 was lost", timeout=5)
            time.sleep(0.5)  # must NOT happen: a window for the lost GPU to be reported again
        lost_lines = [m for m in caplog.messages if "GPU 2" in m and "XID" in m]
        assert len(lost_lines) == 1, "said once, not every few seconds"
    finally:
        source.close()


def test_an_xid_nvml_cannot_name_is_counted_as_unknown() -> None:
    gpus = h100_node(1)
    fake = make_fake_pynvml(gpus)
    source = NvmlSource(fake)
    try:
        fake.raise_xid(gpus[0], 999)  # nvml.h: "eventData is set as 999 for unknown Xid error"
        fake.raise_xid(gpus[0], 13)
        eventually(lambda: sum(xids(source, 0).values()) == 2, what="two XIDs", timeout=5)
        assert xids(source, 0) == {UNKNOWN_XID: 1, 13: 1}
    finally:
        source.close()
