"""AMD Instinct GPUs through amdsmi (ROCm), filling the same catalog as NVML where amdsmi has the value.

amdsmi marks a value it cannot give either by raising AmdSmiLibraryException(NOT_SUPPORTED) or by
returning "N/A" in a dict: both leave the metric out. XGMI links take NVLink's place in the per-link
metrics. A GPU whose basic activity query fails with another library error is reported down for
that cycle while the others keep reporting; each distinct error is logged once.
"""

from __future__ import annotations

import importlib
import logging
from collections import defaultdict
from collections.abc import Callable
from types import ModuleType
from typing import Any

from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, PortReading
from gpuscope.exporter.sources.base import BackendUnavailable
from gpuscope.exporter.sources.errors import GroupGuard, LogOnce

log = logging.getLogger(__name__)

KB = 1024
SLOW_EVERY = 10


def load_amdsmi(importer: Callable[[str], ModuleType] = importlib.import_module) -> ModuleType:
    try:
        return importer("amdsmi")
    except ImportError:
        raise BackendUnavailable("the amdsmi package is not installed; pip install 'gpuscope[amd]'") from None
    except (KeyError, OSError) as exc:
        # Seen with amdsmi 7.0.2 and no ROCm: the import itself raises KeyError('libamd_smi.so').
        raise BackendUnavailable(f"amdsmi cannot load ROCm's libamd_smi ({exc!r}); is ROCm installed?") from None


class AmdSmiSource:
    name = "amdsmi"

    def __init__(self, amdsmi: ModuleType | None = None) -> None:
        self._smi = amdsmi if amdsmi is not None else load_amdsmi()
        try:
            self._smi.amdsmi_init()
            handles = self._smi.amdsmi_get_processor_handles()
        except self._smi.AmdSmiException as exc:
            raise BackendUnavailable(f"amdsmi could not start: {exc}. Is the amdgpu driver loaded?") from None
        if not handles:
            raise BackendUnavailable("amdsmi found no AMD GPUs")
        self._log_once = LogOnce(log)
        self.devices = [_AmdDevice(self._smi, i, h, self._log_once) for i, h in enumerate(handles)]
        self._cycle = 0

    @property
    def gpus(self) -> tuple[GpuIdentity, ...]:
        return tuple(device.identity for device in self.devices)

    def read(self, now: float) -> tuple[tuple[GpuReading, ...], tuple[PortReading, ...]]:
        slow = self._cycle % SLOW_EVERY == 0
        self._cycle += 1
        return tuple(device.read(slow) for device in self.devices), ()

    def close(self) -> None:
        try:
            self._smi.amdsmi_shut_down()
        except self._smi.AmdSmiException as exc:
            log.debug("amdsmi_shut_down: %s", exc)


class _AmdDevice:
    def __init__(self, smi: ModuleType, index: int, handle: Any, log_once: LogOnce) -> None:
        self._smi = smi
        self.index = index
        self.handle = handle
        self.lost = False
        self._slow: dict[str, float] = {}
        self.identity = GpuIdentity(
            index=index,
            uuid=str(smi.amdsmi_get_gpu_device_uuid(handle)),
            model=str(smi.amdsmi_get_gpu_asic_info(handle).get("market_name", "AMD GPU")),
            pci_bus_id=str(smi.amdsmi_get_gpu_device_bdf(handle)),
        )
        not_supported = (
            smi.amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED,
            smi.amdsmi_wrapper.AMDSMI_STATUS_NOT_YET_IMPLEMENTED,
        )
        self._guard = GroupGuard(
            f"GPU {index} ({self.identity.model})",
            log_once,
            errors=smi.AmdSmiLibraryException,
            is_unsupported=lambda exc: exc.get_error_code() in not_supported,  # type: ignore[attr-defined]
        )

    def read(self, slow: bool) -> GpuReading:
        smi, h = self._smi, self.handle
        values: dict[str, float] = {}
        links: dict[int, dict[str, float]] = defaultdict(dict)
        try:
            activity = smi.amdsmi_get_gpu_activity(h)
        except smi.AmdSmiLibraryException as exc:
            if not self.lost:
                log.error("GPU %d (%s) does not answer (%s); reporting it down", self.index, self.identity.uuid, exc)
            self.lost = True
            return GpuReading(gpu=self.identity, up=False)
        if self.lost:
            log.warning("GPU %d (%s) answers again", self.index, self.identity.uuid)
            self.lost = False
        _put(values, "util_pct", activity.get("gfx_activity"))
        _put(values, "mem_copy_util_pct", activity.get("umc_activity"))
        self._guard.run("power", lambda: self._power(values))
        self._guard.run("energy", lambda: self._energy(values))
        self._guard.run(
            "temperature",
            lambda: _put(
                values,
                "temp_c",
                smi.amdsmi_get_temp_metric(h, smi.AmdSmiTemperatureType.HOTSPOT, smi.AmdSmiTemperatureMetric.CURRENT),
            ),
        )
        self._guard.run(
            "memory_temperature",
            lambda: _put(
                values,
                "mem_temp_c",
                smi.amdsmi_get_temp_metric(h, smi.AmdSmiTemperatureType.VRAM, smi.AmdSmiTemperatureMetric.CURRENT),
            ),
        )
        self._guard.run("clocks", lambda: self._clocks(values))
        self._guard.run("memory", lambda: self._memory(values))
        self._guard.run("xgmi", lambda: self._xgmi(values, links))
        if slow:
            self._slow = {}
            self._guard.run("ecc", lambda: self._ecc(self._slow))
            self._guard.run(
                "pcie_replay", lambda: _put(self._slow, "pcie_replay", smi.amdsmi_get_gpu_pci_replay_counter(h))
            )
        values.update(self._slow)
        return GpuReading(gpu=self.identity, up=True, values=values, links=dict(links))

    def _power(self, values: dict[str, float]) -> None:
        info = self._smi.amdsmi_get_power_info(self.handle)
        for key in ("socket_power", "current_socket_power", "average_socket_power"):
            if _number(info.get(key)) is not None:
                _put(values, "power_w", info[key])
                break
        _put(values, "power_limit_w", info.get("power_limit"))

    def _energy(self, values: dict[str, float]) -> None:
        energy = self._smi.amdsmi_get_energy_count(self.handle)
        accumulator, resolution = _number(energy.get("energy_accumulator")), _number(energy.get("counter_resolution"))
        if accumulator is not None and resolution is not None:
            values["energy_j"] = accumulator * resolution / 1e6  # µJ

    def _clocks(self, values: dict[str, float]) -> None:
        smi = self._smi
        _put(values, "sm_clock_mhz", smi.amdsmi_get_clock_info(self.handle, smi.AmdSmiClkType.GFX).get("clk"))
        _put(values, "mem_clock_mhz", smi.amdsmi_get_clock_info(self.handle, smi.AmdSmiClkType.MEM).get("clk"))

    def _memory(self, values: dict[str, float]) -> None:
        smi = self._smi
        _put(values, "fb_total_bytes", smi.amdsmi_get_gpu_memory_total(self.handle, smi.AmdSmiMemoryType.VRAM))
        _put(values, "fb_used_bytes", smi.amdsmi_get_gpu_memory_usage(self.handle, smi.AmdSmiMemoryType.VRAM))

    def _ecc(self, values: dict[str, float]) -> None:
        counts = self._smi.amdsmi_get_gpu_total_ecc_count(self.handle)
        _put(values, "ecc_corrected", counts.get("correctable_count"))
        _put(values, "ecc_uncorrected", counts.get("uncorrectable_count"))

    def _xgmi(self, values: dict[str, float], links: dict[int, dict[str, float]]) -> None:
        metrics = self._smi.amdsmi_get_link_metrics(self.handle)
        count = int(_number(metrics.get("num_links")) or 0)
        if not count:
            return
        tx = rx = 0.0
        for i, link in enumerate(metrics.get("links", [])[:count]):
            written, read = _number(link.get("write")), _number(link.get("read"))
            if written is not None:
                links[i]["link_tx_bytes"] = written * KB
                tx += written * KB
            if read is not None:
                links[i]["link_rx_bytes"] = read * KB
                rx += read * KB
        values["nvlink_tx_bytes"], values["nvlink_rx_bytes"] = tx, rx


def _number(value: Any) -> float | None:
    """amdsmi's values: numbers, or "N/A" for what the GPU does not report."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _put(values: dict[str, float], key: str, raw: Any) -> None:
    number = _number(raw)
    if number is not None:
        values[key] = number
