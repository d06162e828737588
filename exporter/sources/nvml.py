"""NVIDIA GPUs through NVML (nvidia-ml-py, imported as `pynvml`).

The node's GPUs are opened one by one: a GPU NVML counts but will not hand over (NO_PERMISSION, as in
a container or cgroup that may not use it) or that is lost (GPU_IS_LOST) is reported down, named in the
log by index, and tried again on the slow cadence; the others are served. Only NVML itself not starting
is BackendUnavailable (so `--backend auto` moves on).

Per GPU (exporter/sources/nvml_device.py): fast readings every cycle, slowly changing counters (ECC,
remapped rows, NVLink errors, throttle time, power limit, MIG layout) every SLOW_EVERY cycles, carried
over in between. XID errors arrive through NVML events on a thread of their own (nvml_xid.py); PCIe
throughput of GPUs without byte counters is measured on another (nvml_pcie.py).
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType

from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, PortReading
from gpuscope.exporter.sources.base import BackendUnavailable
from gpuscope.exporter.sources.errors import LogOnce
from gpuscope.exporter.sources.nvml_device import NvmlDevice
from gpuscope.exporter.sources.nvml_fields import text
from gpuscope.exporter.sources.nvml_memory import MemoryReader
from gpuscope.exporter.sources.nvml_pcie import PcieThroughputThread
from gpuscope.exporter.sources.nvml_xid import XidListener

log = logging.getLogger(__name__)

SLOW_EVERY = 10


def load_pynvml() -> ModuleType:
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:
        raise BackendUnavailable(
            f"the nvidia-ml-py package is not installed ({exc}); pip install nvidia-ml-py"
        ) from None


def unopened(index: int) -> GpuIdentity:
    """What is known of a GPU NVML counts but could not open: its index. The rest is empty, which the
    ingest format reads as "not known" (docs/ingest-format.md): the collector keeps the identity it
    stored for that GPU rather than overwriting it, and Prometheus treats an empty label as absent."""
    return GpuIdentity(index=index, uuid="", model="", pci_bus_id="")


class NvmlSource:
    name = "nvml"

    def __init__(self, nvml: ModuleType | None = None, xid_events: bool = True) -> None:
        self._nvml = nvml if nvml is not None else load_pynvml()
        try:
            self._nvml.nvmlInit()
            count = int(self._nvml.nvmlDeviceGetCount())
        except self._nvml.NVMLError as exc:
            raise BackendUnavailable(
                f"NVML could not start: {exc}. Is the NVIDIA driver installed and loaded (nvidia-smi works)?"
            ) from None
        self._log_once = LogOnce(log)
        self._memory = MemoryReader(self._nvml)
        self.pcie = PcieThroughputThread(self._nvml, self._log_once)  # for GPUs without PCIe byte counters
        self.driver_version = self._driver_version()
        self.devices: list[NvmlDevice | None] = [self._open(i) for i in range(count)]
        self._cycle = 0
        self._xid = XidListener(self._nvml, self._opened, self._log_once) if xid_events else None

    @property
    def gpus(self) -> tuple[GpuIdentity, ...]:
        return tuple(unopened(i) if d is None else d.identity for i, d in enumerate(self.devices))

    def read(self, now: float) -> tuple[tuple[GpuReading, ...], tuple[PortReading, ...]]:
        slow = self._cycle % SLOW_EVERY == 0
        self._cycle += 1
        if slow:
            self._open_again()
        self.pcie.kick()
        xids = self._xid.counts() if self._xid else {}
        readings = []
        for index, device in enumerate(self.devices):
            counts = xids.get(index, {})
            if device is None:
                readings.append(GpuReading(gpu=unopened(index), up=False, xid_counts=counts))
            else:
                readings.append(device.read(slow, counts))
        return tuple(readings), ()

    def running_pids(self, index: int) -> list[int]:
        """PIDs of compute processes on GPU `index` (for job attribution); [] when unknown."""
        device = self.devices[index]
        return device.running_pids() if device is not None else []

    def mig_running_pids(self, index: int) -> dict[str, list[int]]:
        """MIG device UUID -> PIDs of its compute processes, for GPU `index` in MIG mode; {} otherwise."""
        device = self.devices[index]
        return device.mig_running_pids() if device is not None else {}

    def close(self) -> None:
        if self._xid is not None:
            self._xid.stop()
        self.pcie.stop()
        for device in self._opened():
            device.free()
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:
            log.debug("nvmlShutdown: %s", exc)

    def _opened(self) -> list[NvmlDevice]:
        return [device for device in self.devices if device is not None]

    def _open(self, index: int) -> NvmlDevice | None:
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            return NvmlDevice(nvml, index, handle, self._log_once, self._memory, self.pcie)
        except nvml.NVMLError as exc:
            self._log_once(
                ("open", index, str(exc)),
                logging.WARNING,
                "GPU %d: NVML will not open it (%s); reporting it down, serving the other GPUs",
                index,
                exc,
            )
            return None

    def _open_again(self) -> None:
        for index, device in enumerate(self.devices):
            if device is None:
                self.devices[index] = opened = self._open(index)
                if opened is not None:
                    log.warning("GPU %d (%s) opened: it answers now", index, opened.identity.uuid)

    def _driver_version(self) -> str:
        try:
            return text(self._nvml.nvmlSystemGetDriverVersion())
        except self._nvml.NVMLError as exc:
            log.warning("NVML driver version unknown: %s", exc)
            return "unknown"
