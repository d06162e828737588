"""PCIe throughput without holding up the sampling loop.

nvmlDeviceGetPcieThroughput measures by sampling a byte counter for 20 ms per call (nvml.h): two calls
per GPU, eight GPUs, and a cycle would spend 320 ms waiting. So:
- where the driver has the byte counters themselves (NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES, driver 555+),
  they ride along in the cycle's one field-values call and the rate is their difference over the
  values' own timestamps;
- elsewhere a thread of its own calls nvmlDeviceGetPcieThroughput for each such GPU. Each sampling
  cycle takes what the last pass measured and asks for a new pass, at most one per PERIOD_S: a pass
  keeps the driver sampling for 2 x 20 ms per GPU, so shorter sampling intervals repeat the values
  rather than multiply that load.
"""

from __future__ import annotations

import logging
import threading
import time
from types import ModuleType
from typing import Any

from gpuscope.exporter.sources.errors import LogOnce
from gpuscope.exporter.sources.nvml_fields import Fields

log = logging.getLogger(__name__)

PERIOD_S = 5.0  # the CLI's default sampling interval: there, every cycle gets a fresh pass
KIB = 1024.0  # nvmlDeviceGetPcieThroughput answers in KB/s, 1 KB being 1024 bytes
US_PER_S = 1e6
KEYS = ("pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s")


class PcieCounters:
    """Rates from one GPU's PCIe byte counters, fed each cycle with the counter fields' results."""

    def __init__(self, nvml: ModuleType) -> None:
        self._nvml = nvml
        self.supported = hasattr(nvml, "NVML_FI_DEV_PCIE_COUNT_TX_BYTES")  # False: a binding older than them
        self._previous: list[tuple[float, int] | None] = [None, None]

    def requests(self) -> list[tuple[int, int]]:
        if not self.supported:
            return []
        nvml = self._nvml
        return [(nvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0), (nvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0)]

    def take(self, fields: Fields, values: dict[str, float]) -> bool:
        """Fills the rates; True when the counters turned out unsupported (so the requests changed)."""
        if not self.supported:
            return False
        nvml = self._nvml
        for i, key in enumerate(KEYS):
            status = int(fields.status[i])
            if status == nvml.NVML_ERROR_NOT_SUPPORTED:
                self.supported = False
                return True
            if status != nvml.NVML_SUCCESS:
                self._previous[i] = None  # no rate across a gap we cannot see into
                continue
            now = (float(fields.value[i]), int(fields.timestamp_us[i]))
            before = self._previous[i]
            self._previous[i] = now
            # A counter that went back wrapped (nvml.h: "Value can be wrapped"): skip that interval.
            if before is not None and now[1] > before[1] and now[0] >= before[0]:
                values[key] = (now[0] - before[0]) * US_PER_S / (now[1] - before[1])
        return False


class PcieThroughputThread:
    """Calls nvmlDeviceGetPcieThroughput off the sampling loop, for GPUs without byte counters."""

    def __init__(self, nvml: ModuleType, log_once: LogOnce, period_s: float = PERIOD_S) -> None:
        self._nvml = nvml
        self._log_once = log_once
        self.period_s = period_s
        self._last_pass = -period_s
        self._gpus: dict[int, Any] = {}  # GPU index -> handle
        self._latest: dict[int, dict[str, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wanted = threading.Event()  # a sampling cycle asked for a pass
        self._thread: threading.Thread | None = None

    def add(self, index: int, handle: Any) -> None:
        with self._lock:
            self._gpus[index] = handle
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="nvml-pcie", daemon=True)
            self._thread.start()
        self._wanted.set()  # a first measurement now rather than a cycle later

    def kick(self) -> None:
        """Start a pass, unless the last one started less than a period ago or is still under way."""
        if self._thread is not None and time.monotonic() - self._last_pass >= self.period_s:
            self._wanted.set()

    def latest(self, index: int) -> dict[str, float]:
        """The GPU's most recent throughput (an empty dict until one is measured)."""
        return self._latest.get(index, {})

    def sample_once(self) -> None:
        """One pass over the GPUs: 2 x 20 ms each, spent waiting in the driver (the GIL is released)."""
        nvml = self._nvml
        with self._lock:
            gpus = list(self._gpus.items())
        for index, handle in gpus:
            if self._stop.is_set():
                return
            try:
                tx = nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_TX_BYTES) * KIB
                rx = nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_RX_BYTES) * KIB
            except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound) as exc:
                self._log_once(("pcie", index), logging.INFO, "GPU %d: PCIe throughput not available (%s)", index, exc)
                with self._lock:
                    self._gpus.pop(index, None)
                continue
            except nvml.NVMLError as exc:  # lost or a passing failure: the sampling loop reports the GPU
                self._log_once(("pcie", index, str(exc)), logging.WARNING, "GPU %d: PCIe throughput: %s", index, exc)
                self._latest.pop(index, None)
                continue
            # One dict swapped in whole: the sampling loop reads either the old pair or the new one.
            self._latest[index] = {KEYS[0]: tx, KEYS[1]: rx}

    def stop(self) -> None:
        self._stop.set()
        self._wanted.set()
        if self._thread is not None:
            self._thread.join(2.0)

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            if self._stop.is_set():
                return
            self._last_pass = time.monotonic()
            self.sample_once()
