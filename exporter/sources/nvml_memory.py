"""Framebuffer memory through nvmlDeviceGetMemoryInfo v2, or v1 where the driver predates v2 (R510).

v1's `used` includes what the driver and firmware reserve for themselves (~0.5 GiB on an H100), so an
idle GPU looks busy; v2 reports that reserve apart and `used` is what processes allocated.
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)


class MemoryReader:
    """Shared by every device of one driver: once v2 is found missing, v1 is asked from then on."""

    def __init__(self, nvml: ModuleType) -> None:
        self._nvml = nvml
        self._version: int | None = getattr(nvml, "nvmlMemory_v2", None)  # None: a binding older than v2

    def read(self, handle: Any) -> tuple[float, float]:
        """(used, total) in bytes."""
        used, total, _ = self.read_with_reserve(handle)
        return used, total

    def read_with_reserve(self, handle: Any) -> tuple[float, float, float | None]:
        """(used, total, reserved) in bytes; reserved is None where only v1 answers."""
        nvml = self._nvml
        if self._version is not None:
            try:
                memory = nvml.nvmlDeviceGetMemoryInfo(handle, version=self._version)
                return float(memory.used), float(memory.total), float(memory.reserved)
            except (nvml.NVMLError_FunctionNotFound, nvml.NVMLError_ArgumentVersionMismatch) as exc:
                log.info("nvmlDeviceGetMemoryInfo_v2 unavailable (%s): memory used includes the driver's reserve", exc)
                self._version = None
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        return float(memory.used), float(memory.total), None
