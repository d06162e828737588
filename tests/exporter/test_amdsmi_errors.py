"""Only the statuses that mean a GPU is gone report it down; a busy library is retried, briefly (defect 10)."""

from __future__ import annotations

import time

import pytest

from gpuscope.exporter.sources.amdsmi import BUSY_BUDGET_S, SLOW_EVERY, AmdSmiSource
from gpuscope.exporter.testing.fake_amdsmi import STATUS, FakeAmdGpu, make_fake_amdsmi, mi300x_node

GONE = [
    STATUS.AMDSMI_STATUS_NOT_FOUND,
    STATUS.AMDSMI_STATUS_DRM_ERROR,
    STATUS.AMDSMI_STATUS_FILE_ERROR,
    STATUS.AMDSMI_STATUS_IO,
    STATUS.AMDSMI_STATUS_DRIVER_NOT_LOADED,
    STATUS.AMDSMI_STATUS_AMDGPU_RESTART_ERR,
    STATUS.AMDSMI_STATUS_UNEXPECTED_SIZE,
    STATUS.AMDSMI_STATUS_UNKNOWN_ERROR,
]
TRANSIENT = [
    STATUS.AMDSMI_STATUS_BUSY,
    STATUS.AMDSMI_STATUS_RETRY,
    STATUS.AMDSMI_STATUS_TIMEOUT,
    STATUS.AMDSMI_STATUS_INTERRUPT,
]
NOT_GONE = [
    STATUS.AMDSMI_STATUS_NOT_SUPPORTED,
    STATUS.AMDSMI_STATUS_NOT_YET_IMPLEMENTED,
    STATUS.AMDSMI_STATUS_NO_PERM,
    STATUS.AMDSMI_STATUS_INVAL,
    STATUS.AMDSMI_STATUS_NOT_INIT,
    STATUS.AMDSMI_STATUS_NO_DATA,
]


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def source_over(gpus: list[FakeAmdGpu]) -> tuple[AmdSmiSource, Sleeps]:
    sleeps = Sleeps()
    return AmdSmiSource(make_fake_amdsmi(gpus), sleep=sleeps), sleeps


@pytest.mark.parametrize("status", GONE)
def test_statuses_that_mean_the_gpu_is_gone_report_it_down(status: int) -> None:
    gpus = mi300x_node(2)
    source, _ = source_over(gpus)
    gpus[1].lost, gpus[1].lost_status = True, status
    assert [r.up for r in source.read(0.0)[0]] == [True, False]
    gpus[1].lost = False
    assert source.read(1.0)[0][1].up


@pytest.mark.parametrize("status", NOT_GONE)
def test_other_errors_leave_the_gpu_up_without_its_activity(status: int) -> None:
    gpus = mi300x_node(1)
    source, _ = source_over(gpus)
    gpus[0].fail_next = [status]  # the activity query, the first call of the cycle
    [reading] = source.read(0.0)[0]
    assert reading.up
    assert "util_pct" not in reading.values and reading.values["power_w"] == 640


def test_activity_not_supported_is_not_lost() -> None:
    gpus = mi300x_node(1)
    gpus[0].unsupported = {"activity"}
    source, _ = source_over(gpus)
    for cycle in range(3):
        [reading] = source.read(float(cycle))[0]
        assert reading.up and "util_pct" not in reading.values and reading.values["temp_c"] == 74


def test_a_short_busy_spell_is_retried() -> None:
    gpus = mi300x_node(1)
    source, sleeps = source_over(gpus)
    gpus[0].fail_next = [STATUS.AMDSMI_STATUS_BUSY, STATUS.AMDSMI_STATUS_BUSY]
    [reading] = source.read(0.0)[0]
    assert reading.up and reading.values["util_pct"] == 95
    assert len(sleeps) == 2 and sum(sleeps) < BUSY_BUDGET_S


@pytest.mark.parametrize("status", TRANSIENT)
def test_a_long_busy_spell_carries_the_last_values_and_stays_within_the_budget(status: int) -> None:
    gpus = mi300x_node(2)
    source, sleeps = source_over(gpus)
    before = source.read(0.0)[0]
    gpus[0].gfx_activity = gpus[1].gfx_activity = 10
    gpus[0].lost, gpus[0].lost_status = True, status  # every call answers `status`, all cycle long
    gpus[1].lost, gpus[1].lost_status = True, status
    sleeps.clear()
    after = source.read(1.0)[0]
    assert [r.up for r in after] == [True, True], "busy is not gone"
    assert [r.values for r in after] == [r.values for r in before], "last cycle's values, carried"
    assert [r.links for r in after] == [r.links for r in before]
    assert sum(sleeps) == pytest.approx(BUSY_BUDGET_S), "the budget is spent on the first busy GPU..."
    assert BUSY_BUDGET_S <= 0.005, "...and it is a few ms, for all GPUs of the cycle together"
    gpus[0].lost = gpus[1].lost = False
    assert source.read(2.0)[0][0].values["util_pct"] == 10, "fresh values once the library answers"


def test_budget_is_per_cycle() -> None:
    gpus = mi300x_node(1)
    source, sleeps = source_over(gpus)
    gpus[0].lost, gpus[0].lost_status = True, STATUS.AMDSMI_STATUS_BUSY
    source.read(0.0)
    first = sum(sleeps)
    sleeps.clear()
    source.read(1.0)
    assert first > 0 and sum(sleeps) == pytest.approx(first), "the next cycle retries again"


def test_busy_in_a_later_group_carries_only_what_it_missed() -> None:
    gpus = mi300x_node(1)
    source, _ = source_over(gpus)
    source.read(0.0)
    gpus[0].gfx_activity, gpus[0].socket_power_w, gpus[0].hotspot_c = 60, 700, 80
    gpus[0].fail_next = [None] + [STATUS.AMDSMI_STATUS_BUSY] * 100  # activity answers, then busy
    [reading] = source.read(1.0)[0]
    assert reading.up and reading.values["util_pct"] == 60, "what answered is fresh"
    assert reading.values["power_w"] == 640 and reading.values["temp_c"] == 74, "what was busy is carried"


def test_a_busy_library_cannot_stall_the_cycle() -> None:
    """With the real sleep: eight GPUs whose every call is busy still take milliseconds, not seconds."""
    gpus = mi300x_node(8)
    source = AmdSmiSource(make_fake_amdsmi(gpus))
    for gpu in gpus:
        gpu.lost, gpu.lost_status = True, STATUS.AMDSMI_STATUS_BUSY
    started = time.monotonic()
    readings = source.read(0.0)[0]
    assert time.monotonic() - started < 0.1 and all(r.up for r in readings)


def test_slow_counters_survive_a_busy_slow_cycle() -> None:
    """ECC and PCIe replay are read every SLOW_EVERY cycles; a busy one must not drop them until the next."""
    gpus = mi300x_node(1)
    source, _ = source_over(gpus)
    for cycle in range(SLOW_EVERY):
        source.read(float(cycle))
    gpus[0].lost, gpus[0].lost_status = True, STATUS.AMDSMI_STATUS_BUSY
    assert source.read(10.0)[0][0].values["ecc_corrected"] == 0, "the slow cycle, busy: carried"
    gpus[0].lost = False
    assert source.read(11.0)[0][0].values["ecc_corrected"] == 0, "the next, not slow: still there"
