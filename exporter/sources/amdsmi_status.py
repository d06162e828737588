"""What an amdsmi status means for a GPU (gone, busy for now, or neither), and the brief retry of a busy one.

The codes come from the installed wrapper (amdsmi.amdsmi_wrapper) by name, so they are the real values
of whichever amdsmi release the node has; a name an older release lacks is skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

T = TypeVar("T")

# The GPU is gone: report it down. Read from amd_smi.cc and rocm_smi's ErrnoToRsmiStatus, where each
# status comes from:
#   NOT_FOUND          the library no longer finds the device (ESRCH; its handle maps to nothing)
#   DRM_ERROR          libdrm calls on the device fail: its DRM node is gone
#   FILE_ERROR         its sysfs files cannot be read (EBADF, EISDIR): the device was unbound
#   IO                 an I/O error talking to it
#   DRIVER_NOT_LOADED  amdgpu itself is gone
#   AMDGPU_RESTART_ERR the driver failed to bring the GPU back after a reset
#   UNEXPECTED_SIZE    rocm_smi's translation of EIO from a sysfs read: what a hung SMU answers
#   UNKNOWN_ERROR      rocm_smi's translation of any other errno, ENODEV included: what reads of an
#                      unplugged (fallen off the bus) device's sysfs files answer
# Not gone, so never reported down:
#   NOT_SUPPORTED, NOT_YET_IMPLEMENTED  the query is not there; also what a GPU mid-reset answers
#                      (amdgpu returns EPERM during a reset, which rocm_smi maps to NOT_SUPPORTED)
#   NO_PERM            a permission problem of the exporter's (EACCES), not of the GPU
#   INVAL, NOT_INIT, NO_DATA and the rest: the caller's or the library's state, not the device's
GONE = (
    "AMDSMI_STATUS_NOT_FOUND",
    "AMDSMI_STATUS_DRM_ERROR",
    "AMDSMI_STATUS_FILE_ERROR",
    "AMDSMI_STATUS_IO",
    "AMDSMI_STATUS_DRIVER_NOT_LOADED",
    "AMDSMI_STATUS_AMDGPU_RESTART_ERR",
    "AMDSMI_STATUS_UNEXPECTED_SIZE",
    "AMDSMI_STATUS_UNKNOWN_ERROR",
)
# Busy for now: retried within the cycle's budget, then last cycle's values are carried. BUSY is another
# process (amd-smi, a second exporter) holding the library's per-device lock, or EBUSY from the driver;
# RETRY and TIMEOUT are the wrapper's AmdSmiRetryException and AmdSmiTimeoutException; INTERRUPT is EINTR.
TRANSIENT = ("AMDSMI_STATUS_BUSY", "AMDSMI_STATUS_RETRY", "AMDSMI_STATUS_TIMEOUT", "AMDSMI_STATUS_INTERRUPT")
UNSUPPORTED = ("AMDSMI_STATUS_NOT_SUPPORTED", "AMDSMI_STATUS_NOT_YET_IMPLEMENTED")

BUSY_BUDGET_S = 0.005  # the most one cycle sleeps retrying busy calls, all GPUs together
FIRST_PAUSE_US = 500  # doubled on each retry of one call


class StatusCodes:
    def __init__(self, smi: ModuleType) -> None:
        wrapper = smi.amdsmi_wrapper
        self.gone, self.transient, self.unsupported = (
            frozenset(getattr(wrapper, name) for name in names if hasattr(wrapper, name))
            for names in (GONE, TRANSIENT, UNSUPPORTED)
        )


class StillBusy(Exception):
    """A call still answered busy when the cycle's retry budget ran out."""


class BusyBudget:
    """How long one cycle may still sleep retrying calls the library answered busy: a few ms in all,
    so a library held by another process cannot stall the sampling cycle."""

    def __init__(self, seconds: float, sleep: Callable[[float], None]) -> None:
        self._left_us = round(seconds * 1e6)  # whole µs, so the pauses never add up past the budget
        self._sleep = sleep

    def pause(self, retry: int) -> bool:
        pause_us = min(FIRST_PAUSE_US * 2**retry, self._left_us)
        if pause_us <= 0:
            return False
        self._sleep(pause_us / 1e6)
        self._left_us -= pause_us
        return True


def answer(smi: ModuleType, codes: StatusCodes, budget: BusyBudget, read: Callable[..., T], *args: Any) -> T:
    """`read(*args)`, retried while the library answers busy and the budget lasts; then StillBusy."""
    retry = 0
    while True:
        try:
            return read(*args)
        except smi.AmdSmiLibraryException as exc:
            if error_code(exc) not in codes.transient:
                raise
            if not budget.pause(retry):
                raise StillBusy(str(exc)) from exc
            retry += 1


def error_code(exc: Any) -> int | None:
    try:
        return int(exc.get_error_code())
    except (AttributeError, TypeError, ValueError):
        return None
