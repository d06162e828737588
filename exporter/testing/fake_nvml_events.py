"""The fake NVML's event sets: XID events queued per set, delivered by nvmlEventSetWait.

As with the driver: a set only hears the GPUs registered with it; freeing a set drops what it held;
and once a registered GPU has fallen off the bus, a wait delivers that GPU's pending events (XID 79
arrives as it falls) and then answers NVML_ERROR_GPU_IS_LOST every time, so the other GPUs' events
are not delivered through that set any more.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

import pynvml as real

from gpuscope.exporter.testing.fake_nvml_gpus import FakeGpu


class FakeEventSet:
    def __init__(self) -> None:
        self.gpus: list[FakeGpu] = []
        self.freed = False
        self._pending: collections.deque[tuple[FakeGpu, int]] = collections.deque()
        self._changed = threading.Condition()

    def register(self, gpu: FakeGpu) -> None:
        if all(g is not gpu for g in self.gpus):
            self.gpus.append(gpu)

    def post(self, gpu: FakeGpu, xid: int) -> None:
        with self._changed:
            if not self.freed and any(g is gpu for g in self.gpus):
                self._pending.append((gpu, xid))
                self._changed.notify_all()

    def wake(self) -> None:
        """A GPU's state changed (say it fell off the bus): waiters look again."""
        with self._changed:
            self._changed.notify_all()

    def wait(self, timeout_ms: int) -> tuple[FakeGpu, int]:
        deadline = time.monotonic() + timeout_ms / 1000
        with self._changed:
            while True:
                lost = [g for g in self.gpus if g.lost]
                for event in self._pending:
                    if any(event[0] is g for g in lost):
                        self._pending.remove(event)
                        return event
                if lost:
                    raise real.NVMLError(real.NVML_ERROR_GPU_IS_LOST)
                if self._pending:
                    return self._pending.popleft()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise real.NVMLError(real.NVML_ERROR_TIMEOUT)
                self._changed.wait(remaining)

    def free(self) -> None:
        with self._changed:
            self.freed = True
            self._pending.clear()


def event_data(device: Any, xid: int) -> Any:
    """What nvmlEventSetWait returns: the binding's own structure, `device` a handle like any other."""
    data = real.c_nvmlEventData_t()
    data.device = device
    data.eventType = real.nvmlEventTypeXidCriticalError
    data.eventData = xid
    return data
