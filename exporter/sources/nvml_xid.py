"""XID errors, counted per GPU and code from NVML's event stream on a thread of its own.

XIDs are events, not gauges. Two things the driver does that this listener is built around:
- once any GPU registered with an event set falls off the bus, waiting on the set answers GPU_IS_LOST
  (nvml.h), so the set is built again without that GPU and the healthy GPUs' events keep coming;
- an event names its GPU by handle, matched here against the known GPUs' handles: asking NVML for the
  UUID of a GPU that just fell off the bus fails, and would drop exactly the XID 79 that says so.
eventData 999 is an XID the driver could not identify; it is counted under UNKNOWN_XID.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, Protocol

from gpuscope.exporter.snapshot import UNKNOWN_XID
from gpuscope.exporter.sources.errors import LogOnce

log = logging.getLogger(__name__)

WAIT_MS = 1000
RECHECK_S = 60.0  # how often to look whether the GPUs worth listening to changed (lost, back, opened)
BACKOFF_S = 1.0  # after an error the next wait would only repeat
NVML_UNKNOWN_XID = 999  # nvml.h: "eventData is set as 999 for unknown Xid error"


class Listened(Protocol):
    index: int
    handle: Any


class XidListener:
    def __init__(self, nvml: ModuleType, devices: Callable[[], Sequence[Listened]], log_once: LogOnce) -> None:
        self._nvml = nvml
        self._devices = devices  # the GPUs opened so far (more may open later)
        self._log_once = log_once
        self._counts: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))  # GPU index -> XID -> n
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._event_set: Any = None
        self._by_address: dict[int, int] = {}  # handle address -> GPU index, for the GPUs registered
        self._subscribe()
        self._thread = threading.Thread(target=self._run, name="nvml-xid", daemon=True)
        self._thread.start()

    def counts(self) -> dict[int, dict[int, int]]:
        """GPU index -> XID code -> events since the exporter started."""
        with self._lock:
            return {index: dict(codes) for index, codes in self._counts.items()}

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(WAIT_MS / 1000 * 3)
        self._free()

    def _run(self) -> None:
        nvml = self._nvml
        recheck = time.monotonic() + RECHECK_S
        while not self._stop.is_set():
            if time.monotonic() >= recheck:
                recheck = time.monotonic() + RECHECK_S
                if self._answering() != set(self._by_address.values()):
                    self._subscribe()
            if not self._by_address:
                self._stop.wait(min(RECHECK_S, max(0.0, recheck - time.monotonic())))
                continue
            try:
                event = nvml.nvmlEventSetWait(self._event_set, WAIT_MS)
            except nvml.NVMLError_Timeout:
                continue
            except nvml.NVMLError_GpuIsLost:
                before = set(self._by_address.values())
                self._subscribe()
                if set(self._by_address.values()) == before:  # no GPU owns up to it: do not spin
                    self._stop.wait(BACKOFF_S)
                continue
            except nvml.NVMLError as exc:
                self._log_once(("xid-wait", str(exc)), logging.WARNING, "waiting for XID events failed: %s", exc)
                self._stop.wait(BACKOFF_S)
                continue
            self._count(event)

    def _count(self, event: Any) -> None:
        index = self._by_address.get(_address(event.device))
        if index is None:
            self._log_once(("xid-stranger",), logging.WARNING, "XID %d on a GPU not known here", event.eventData)
            return
        xid = int(event.eventData)
        code = UNKNOWN_XID if xid == NVML_UNKNOWN_XID else xid
        log.warning("XID %s on GPU %d", xid if code else "unknown (999)", index)
        with self._lock:
            codes = self._counts[index]
            codes[code] = codes.pop(code, 0) + 1  # moved to the end: the last key is the latest XID

    def _subscribe(self) -> None:
        """A new event set, with every opened GPU that still answers."""
        nvml = self._nvml
        self._free()
        try:
            self._event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            self._log_once(("xid-set", str(exc)), logging.WARNING, "XID events unavailable: %s", exc)
            return
        by_address = {}
        for device in self._devices():
            if not self._answers(device):
                continue
            try:
                nvml.nvmlDeviceRegisterEvents(device.handle, nvml.nvmlEventTypeXidCriticalError, self._event_set)
            except nvml.NVMLError as exc:
                self._log_once(
                    ("xid", device.index, str(exc)),
                    logging.INFO,
                    "GPU %d: XID events unavailable (%s)",
                    device.index,
                    exc,
                )
                continue
            by_address[_address(device.handle)] = device.index
        self._by_address = by_address

    def _answering(self) -> set[int]:
        return {device.index for device in self._devices() if self._answers(device)}

    def _answers(self, device: Listened) -> bool:
        nvml = self._nvml
        try:
            nvml.nvmlDeviceGetUUID(device.handle)
        except nvml.NVMLError_GpuIsLost:
            self._log_once(
                ("xid-lost", device.index),
                logging.WARNING,
                "GPU %d fell off the bus: no more XID events from it; the other GPUs' are still counted",
                device.index,
            )
            return False
        except nvml.NVMLError:
            pass  # answered, if not with its UUID: it is there
        return True

    def _free(self) -> None:
        if self._event_set is None:
            return
        try:
            self._nvml.nvmlEventSetFree(self._event_set)
        except self._nvml.NVMLError as exc:
            log.debug("nvmlEventSetFree: %s", exc)
        self._event_set = None
        self._by_address = {}


def _address(handle: Any) -> int:
    """What identifies a device handle: the address it holds (each call returns a new Python object)."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value or 0
    except (TypeError, ctypes.ArgumentError):
        return id(handle)
