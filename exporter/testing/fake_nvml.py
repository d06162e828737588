"""A fake `pynvml` module: the real module's constants, structures and NVMLError classes, with the
functions that need a driver replaced by ones backed by FakeGpu objects.

Units are NVML's: power in mW, energy in mJ, memory in bytes, clocks in MHz, violation time in ns,
PCIe throughput in KB/s, NVLink throughput fields in KiB.
"""

from __future__ import annotations

import ctypes
import queue
import types
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pynvml as real

from gpuscope.exporter.sources.nvml_fields import field_dtype

GIB = 2**30


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    bus_id: str = "00000000:18:00.0"
    util_gpu: int = 97
    util_mem: int = 31
    temp_c: int = 71
    mem_temp_c: int = 78
    power_mw: int = 612_000
    power_limit_mw: int = 700_000
    energy_mj: int = 9_000_000_000
    sm_clock: int = 1980
    mem_clock: int = 2619
    fb_total: int = 80 * GIB
    fb_used: int = 61 * GIB
    clocks_event_reasons: int = 0
    power_violation_ns: int = 0
    thermal_violation_ns: int = 0
    pcie_replay: int = 0
    pcie_tx_kbs: int = 1_200_000
    pcie_rx_kbs: int = 900_000
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)  # correctable, uncorrectable, pending, failure
    nvlinks: int = 18
    nvlink_tx_kib: int = 10_000_000
    nvlink_rx_kib: int = 9_000_000
    nvlink_errors: dict[int, int] = field(default_factory=dict)  # NVML_NVLINK_ERROR_DL_* -> count per link
    gpm_sm_util: float = 83.0
    gpm_tensor_util: float = 57.0
    processes: list[int] = field(default_factory=list)  # PIDs running on this GPU
    # What this GPU lacks: names from UNSUPPORTABLE. Each raises NVMLError_NotSupported.
    unsupported: set[str] = field(default_factory=set)
    lost: bool = False  # fell off the bus: every call raises NVMLError_GpuIsLost


UNSUPPORTABLE = {
    "memory_temp",
    "gpm",
    "nvlink",
    "ecc",
    "remapped_rows",
    "energy",
    "pcie_throughput",
    "violation",
    "events",
}


class _Handle:
    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu


def make_fake_pynvml(gpus: list[FakeGpu], *, library: bool = True, driver: bool = True) -> types.ModuleType:
    """A module to use in place of `pynvml`. Call counts are kept in module.calls."""
    fake = types.ModuleType("pynvml")
    fake.__dict__.update({k: v for k, v in vars(real).items() if not k.startswith("__")})
    state: dict[str, Any] = {"init": False, "events": queue.Queue(), "samples": {}, "next_sample": 1}
    calls: dict[str, int] = {}
    fake.calls = calls  # type: ignore[attr-defined]
    fake.gpus = gpus  # type: ignore[attr-defined]

    def fail(code: int) -> None:
        raise real.NVMLError(code)  # maps to the real subclass, e.g. NVMLError_NotSupported

    def api(fn: Any) -> Any:
        name = fn.__name__

        def wrapper(*args: Any) -> Any:
            calls[name] = calls.get(name, 0) + 1
            if name not in ("nvmlInit", "nvmlInitWithFlags") and not state["init"]:
                fail(real.NVML_ERROR_UNINITIALIZED)
            if args and isinstance(args[0], _Handle) and args[0].gpu.lost:
                fail(real.NVML_ERROR_GPU_IS_LOST)
            return fn(*args)

        wrapper.__name__ = name
        setattr(fake, name, wrapper)
        return wrapper

    def need(gpu: FakeGpu, feature: str) -> None:
        if feature in gpu.unsupported:
            fail(real.NVML_ERROR_NOT_SUPPORTED)

    @api
    def nvmlInit() -> None:
        if not library:
            fail(real.NVML_ERROR_LIBRARY_NOT_FOUND)
        if not driver:
            fail(real.NVML_ERROR_DRIVER_NOT_LOADED)
        state["init"] = True

    @api
    def nvmlShutdown() -> None:
        state["init"] = False

    @api
    def nvmlSystemGetDriverVersion() -> str:
        return "570.124.06"

    @api
    def nvmlDeviceGetCount() -> int:
        return len(gpus)

    @api
    def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
        if not 0 <= index < len(gpus):
            fail(real.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(gpus[index])

    @api
    def nvmlDeviceGetUUID(h: _Handle) -> str:
        return h.gpu.uuid

    @api
    def nvmlDeviceGetName(h: _Handle) -> str:
        return h.gpu.name

    @api
    def nvmlDeviceGetPciInfo(h: _Handle) -> Any:
        info = real.nvmlPciInfo_t()
        info.busId = h.gpu.bus_id.encode()
        return info

    @api
    def nvmlDeviceGetUtilizationRates(h: _Handle) -> Any:
        rates = real.c_nvmlUtilization_t()
        rates.gpu, rates.memory = h.gpu.util_gpu, h.gpu.util_mem
        return rates

    @api
    def nvmlDeviceGetMemoryInfo(h: _Handle, version: Any = None) -> Any:
        memory = real.c_nvmlMemory_t()
        memory.total, memory.used = h.gpu.fb_total, h.gpu.fb_used
        memory.free = h.gpu.fb_total - h.gpu.fb_used
        return memory

    @api
    def nvmlDeviceGetTemperature(h: _Handle, sensor: int) -> int:
        if sensor != real.NVML_TEMPERATURE_GPU:
            fail(real.NVML_ERROR_INVALID_ARGUMENT)
        return h.gpu.temp_c

    @api
    def nvmlDeviceGetPowerUsage(h: _Handle) -> int:
        return h.gpu.power_mw

    @api
    def nvmlDeviceGetEnforcedPowerLimit(h: _Handle) -> int:
        return h.gpu.power_limit_mw

    @api
    def nvmlDeviceGetTotalEnergyConsumption(h: _Handle) -> int:
        need(h.gpu, "energy")
        return h.gpu.energy_mj

    @api
    def nvmlDeviceGetClockInfo(h: _Handle, clock: int) -> int:
        return {real.NVML_CLOCK_SM: h.gpu.sm_clock, real.NVML_CLOCK_MEM: h.gpu.mem_clock}[clock]

    @api
    def nvmlDeviceGetCurrentClocksEventReasons(h: _Handle) -> int:
        return h.gpu.clocks_event_reasons

    @api
    def nvmlDeviceGetViolationStatus(h: _Handle, policy: int) -> Any:
        need(h.gpu, "violation")
        violation = real.c_nvmlViolationTime_t()
        violation.referenceTime = 0
        violation.violationTime = {
            real.NVML_PERF_POLICY_POWER: h.gpu.power_violation_ns,
            real.NVML_PERF_POLICY_THERMAL: h.gpu.thermal_violation_ns,
        }.get(policy, 0)
        return violation

    @api
    def nvmlDeviceGetPcieReplayCounter(h: _Handle) -> int:
        return h.gpu.pcie_replay

    @api
    def nvmlDeviceGetPcieThroughput(h: _Handle, counter: int) -> int:
        need(h.gpu, "pcie_throughput")
        return h.gpu.pcie_tx_kbs if counter == real.NVML_PCIE_UTIL_TX_BYTES else h.gpu.pcie_rx_kbs

    @api
    def nvmlDeviceGetTotalEccErrors(h: _Handle, error_type: int, counter_type: int) -> int:
        need(h.gpu, "ecc")
        return h.gpu.ecc_corrected if error_type == real.NVML_MEMORY_ERROR_TYPE_CORRECTED else h.gpu.ecc_uncorrected

    @api
    def nvmlDeviceGetRemappedRows(h: _Handle) -> tuple[int, int, int, int]:
        need(h.gpu, "remapped_rows")
        return h.gpu.remapped_rows

    @api
    def nvmlDeviceGetFieldValues(h: _Handle, field_ids: list[Any]) -> Any:
        values = (real.c_nvmlFieldValue_t * len(field_ids))()
        view = np.frombuffer(
            memoryview(values), dtype=field_dtype(real.c_nvmlFieldValue_t)
        )  # fill like C would: raw memory
        requested = [r if isinstance(r, tuple) else (r, 0) for r in field_ids]
        ids = np.array([r[0] for r in requested], dtype=np.uint32)
        scopes = np.array([r[1] for r in requested], dtype=np.uint32)
        view["fieldId"], view["scopeId"] = ids, scopes
        view["nvmlReturn"] = real.NVML_ERROR_NOT_SUPPORTED
        gpu = h.gpu
        if "memory_temp" not in gpu.unsupported:
            _set(view, ids == real.NVML_FI_DEV_MEMORY_TEMP, real.NVML_VALUE_TYPE_UNSIGNED_INT, "ui", gpu.mem_temp_c)
        if "nvlink" not in gpu.unsupported:
            _set(view, ids == real.NVML_FI_DEV_NVLINK_LINK_COUNT, real.NVML_VALUE_TYPE_UNSIGNED_INT, "ui", gpu.nvlinks)
            on_link = scopes < gpu.nvlinks
            for field_id, base in (
                (real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, gpu.nvlink_tx_kib),
                (real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, gpu.nvlink_rx_kib),
            ):
                _set(view, (ids == field_id) & on_link, real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ull", base + scopes)
        return values

    @api
    def nvmlDeviceGetNvLinkErrorCounter(h: _Handle, link: int, counter: int) -> int:
        need(h.gpu, "nvlink")
        if link >= h.gpu.nvlinks:
            fail(real.NVML_ERROR_INVALID_ARGUMENT)
        return h.gpu.nvlink_errors.get(counter, 0)

    @api
    def nvmlGpmQueryDeviceSupport(h: _Handle) -> Any:
        support = real.c_nvmlGpmSupport_t()
        support.version = real.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = 0 if "gpm" in h.gpu.unsupported else 1
        return support

    @api
    def nvmlGpmSampleAlloc() -> Any:
        # A real sample is an opaque pointer; ours points at a counter that names it.
        cell = ctypes.c_uint64(state["next_sample"])
        state["next_sample"] += 1
        sample = ctypes.cast(ctypes.pointer(cell), real.c_nvmlGpmSample_t)
        state["samples"][cell.value] = (cell, None)
        return sample

    @api
    def nvmlGpmSampleFree(sample: Any) -> None:
        state["samples"].pop(_sample_key(sample), None)

    @api
    def nvmlGpmSampleGet(h: _Handle, sample: Any) -> Any:
        need(h.gpu, "gpm")
        key = _sample_key(sample)
        state["samples"][key] = (state["samples"][key][0], h.gpu)
        return sample

    @api
    def nvmlGpmMetricsGet(metrics_get: Any) -> Any:
        if metrics_get.version != real.NVML_GPM_METRICS_GET_VERSION:
            fail(real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        gpu = state["samples"][_sample_key(metrics_get.sample2)][1]
        if gpu is None or state["samples"][_sample_key(metrics_get.sample1)][1] is None:
            fail(real.NVML_ERROR_INVALID_ARGUMENT)
        for i in range(metrics_get.numMetrics):
            metric = metrics_get.metrics[i]
            metric.nvmlReturn = real.NVML_SUCCESS
            if metric.metricId == real.NVML_GPM_METRIC_SM_UTIL:
                metric.value = gpu.gpm_sm_util
            elif metric.metricId == real.NVML_GPM_METRIC_ANY_TENSOR_UTIL:
                metric.value = gpu.gpm_tensor_util
            else:
                metric.nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED
        return metrics_get

    @api
    def nvmlDeviceGetComputeRunningProcesses(h: _Handle) -> list[Any]:
        out = []
        for pid in h.gpu.processes:
            info = real.c_nvmlProcessInfo_t()
            info.pid, info.usedGpuMemory = pid, 1 * GIB
            out.append(info)
        return out

    @api
    def nvmlEventSetCreate() -> Any:
        return object()

    @api
    def nvmlDeviceRegisterEvents(h: _Handle, event_types: int, event_set: Any) -> None:
        need(h.gpu, "events")

    @api
    def nvmlEventSetWait(event_set: Any, timeout_ms: int) -> Any:
        try:
            gpu, xid = state["events"].get(timeout=timeout_ms / 1000)
        except queue.Empty:
            fail(real.NVML_ERROR_TIMEOUT)
        return _EventData(_Handle(gpu), real.nvmlEventTypeXidCriticalError, xid)

    @api
    def nvmlEventSetFree(event_set: Any) -> None:
        pass

    def raise_xid(gpu: FakeGpu, xid: int) -> None:
        """Test hook: the driver reports XID `xid` on `gpu`."""
        state["events"].put((gpu, xid))

    fake.raise_xid = raise_xid  # type: ignore[attr-defined]
    return fake


@dataclass
class _EventData:
    """Shaped like c_nvmlEventData_t; `device` is a handle the other calls accept."""

    device: _Handle
    eventType: int
    eventData: int
    gpuInstanceId: int = 0
    computeInstanceId: int = 0


def _set(view: np.ndarray, where: np.ndarray, value_type: int, member: str, value: Any) -> None:
    view["valueType"][where] = value_type
    view[member][where] = value[where] if isinstance(value, np.ndarray) else value
    view["nvmlReturn"][where] = real.NVML_SUCCESS


def _sample_key(sample: Any) -> int:
    return int(ctypes.cast(sample, ctypes.POINTER(ctypes.c_uint64)).contents.value)


def h100_node(gpus: int = 8) -> list[FakeGpu]:
    """A healthy 8-GPU Hopper node."""
    return [
        FakeGpu(uuid=f"GPU-00000000-0000-4000-8000-{i:012d}", bus_id=f"00000000:{0x18 + 0x11 * i:02X}:00.0")
        for i in range(gpus)
    ]
