"""A fake `pynvml` module: the real module's constants, structures and NVMLError classes, with the
functions that need a driver replaced by ones backed by FakeGpu objects (exporter/testing/fake_nvml_gpus.py).

Behaviour copied from the driver, because the exporter's handling of it is what the tests check:
- nvmlDeviceGetPcieThroughput samples for 20 ms per call (nvml.h), so it sleeps 20 ms;
- nvmlDeviceGetMemoryInfo v1 counts reserved memory as used, v2 reports it apart;
- in MIG mode the GPU answers NOT_SUPPORTED for utilisation and remapped rows, and its memory and
  process list need privileges (NO_PERMISSION otherwise); MIG device handles answer for themselves;
- nvmlDeviceGetFieldValues answers each field in its own status: a field the GPU or driver lacks (such
  as the recovery action on a driver older than it) is NOT_SUPPORTED there, never an error of the call;
- a GPU that fell off the bus answers GPU_IS_LOST to every call, and to event-set waits;
- handles are c_nvmlDevice_t pointers, a new object per call, the same address for the same device.
"""

from __future__ import annotations

import ctypes
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pynvml as real

from gpuscope.exporter.sources.nvml_fields import UINT_MAX, field_dtype
from gpuscope.exporter.testing.fake_nvml_events import FakeEventSet, event_data
from gpuscope.exporter.testing.fake_nvml_gpus import (
    GIB,
    UNSUPPORTABLE,
    FakeGpu,
    FakeMigDevice,
    h100_node,
    mig_layout,
)
from gpuscope.exporter.testing.fake_nvml_handles import FakeHandles, Target, fail, need, whole
from gpuscope.exporter.testing.fake_nvml_mig import register_mig_calls

__all__ = ["GIB", "UNSUPPORTABLE", "FakeGpu", "FakeMigDevice", "h100_node", "make_fake_pynvml", "mig_layout"]

PCIE_SAMPLE_S = 0.020  # nvmlDeviceGetPcieThroughput: "querying a byte counter over a 20ms interval"


def make_fake_pynvml(gpus: list[FakeGpu], *, library: bool = True, driver: bool = True) -> types.ModuleType:
    """A module to use in place of `pynvml`. Call counts are kept in module.calls."""
    fake = types.ModuleType("pynvml")
    fake.__dict__.update({k: v for k, v in vars(real).items() if not k.startswith("__")})
    state: dict[str, Any] = {"init": False, "samples": {}, "next_sample": 1, "event_sets": [], "t0": time.time()}
    handles = FakeHandles()
    calls: dict[str, int] = {}
    fake.calls = calls  # type: ignore[attr-defined]
    fake.gpus = gpus  # type: ignore[attr-defined]

    def api(fn: Callable[..., Any]) -> Callable[..., Any]:
        """Registers `fn` under its name; a handle argument reaches `fn` as (device, the GPU it is on)."""
        name = fn.__name__

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[name] = calls.get(name, 0) + 1
            if name != "nvmlInit" and not state["init"]:
                fail(real.NVML_ERROR_UNINITIALIZED)
            if args and isinstance(args[0], real.c_nvmlDevice_t):
                target, gpu = handles.resolve(args[0])
                if gpu.lost:
                    fail(real.NVML_ERROR_GPU_IS_LOST)
                args = (target, gpu, *args[1:])
            return fn(*args, **kwargs)

        wrapper.__name__ = name
        setattr(fake, name, wrapper)
        return wrapper

    # --- library and device discovery ---

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
        return len(gpus)  # like nvmlDeviceGetCount_v2: GPUs we may not open are counted too

    @api
    def nvmlDeviceGetHandleByIndex(index: int) -> Any:
        if not 0 <= index < len(gpus):
            fail(real.NVML_ERROR_INVALID_ARGUMENT)
        if gpus[index].no_permission:
            fail(real.NVML_ERROR_NO_PERMISSION)
        return handles.handle(gpus[index], gpus[index], kept=True)

    @api
    def nvmlDeviceGetUUID(t: Target, gpu: FakeGpu) -> str:
        return t.uuid

    @api
    def nvmlDeviceGetName(t: Target, gpu: FakeGpu) -> str:
        return f"{gpu.name} MIG {t.profile}" if isinstance(t, FakeMigDevice) else gpu.name

    @api
    def nvmlDeviceGetPciInfo(t: Target, gpu: FakeGpu) -> Any:
        info = real.nvmlPciInfo_t()
        info.busId = gpu.bus_id.encode()
        return info

    # --- readings ---

    @api
    def nvmlDeviceGetUtilizationRates(t: Target, gpu: FakeGpu) -> Any:
        if isinstance(t, FakeMigDevice) or gpu.mig_enabled:
            fail(real.NVML_ERROR_NOT_SUPPORTED)  # "On MIG-enabled GPUs, ... not currently supported"
        rates = real.c_nvmlUtilization_t()
        rates.gpu, rates.memory = gpu.util_gpu, gpu.util_mem
        return rates

    @api
    def nvmlDeviceGetMemoryInfo(t: Target, gpu: FakeGpu, version: int | None = None) -> Any:
        if version:
            if "memory_v2" in gpu.unsupported:
                fail(real.NVML_ERROR_FUNCTION_NOT_FOUND)  # the binding cannot find nvmlDeviceGetMemoryInfo_v2
            if version != real.nvmlMemory_v2:
                fail(real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        if isinstance(t, FakeMigDevice):
            total, used, reserved = t.memory_mib * 2**20, t.fb_used, t.fb_reserved
        elif gpu.mig_enabled and not gpu.privileged:
            return fail(real.NVML_ERROR_NO_PERMISSION)
        elif gpu.mig_enabled:
            total, used, reserved = gpu.fb_total, sum(m.fb_used for m in gpu.mig_devices), gpu.fb_reserved
        else:
            total, used, reserved = gpu.fb_total, gpu.fb_used, gpu.fb_reserved
        if not version:
            memory = real.c_nvmlMemory_t()
            memory.total, memory.used, memory.free = total, used + reserved, total - used - reserved
            return memory
        memory = real.c_nvmlMemory_v2_t()
        memory.version = version
        memory.total, memory.reserved, memory.used = total, reserved, used
        memory.free = total - reserved - used
        return memory

    @api
    def nvmlDeviceGetTemperature(t: Target, gpu: FakeGpu, sensor: int) -> int:
        if sensor != real.NVML_TEMPERATURE_GPU:
            fail(real.NVML_ERROR_INVALID_ARGUMENT)
        return whole(t, gpu).temp_c

    @api
    def nvmlDeviceGetPowerUsage(t: Target, gpu: FakeGpu) -> int:
        return whole(t, gpu).power_mw

    @api
    def nvmlDeviceGetEnforcedPowerLimit(t: Target, gpu: FakeGpu) -> int:
        return whole(t, gpu).power_limit_mw

    @api
    def nvmlDeviceGetTotalEnergyConsumption(t: Target, gpu: FakeGpu) -> int:
        need(whole(t, gpu), "energy")
        return gpu.energy_mj

    @api
    def nvmlDeviceGetClockInfo(t: Target, gpu: FakeGpu, clock: int) -> int:
        return {real.NVML_CLOCK_SM: gpu.sm_clock, real.NVML_CLOCK_MEM: gpu.mem_clock}[clock]

    @api
    def nvmlDeviceGetCurrentClocksEventReasons(t: Target, gpu: FakeGpu) -> int:
        return whole(t, gpu).clocks_event_reasons

    @api
    def nvmlDeviceGetViolationStatus(t: Target, gpu: FakeGpu, policy: int) -> Any:
        need(whole(t, gpu), "violation")
        violation = real.c_nvmlViolationTime_t()
        violation.referenceTime = 0
        violation.violationTime = {
            real.NVML_PERF_POLICY_POWER: gpu.power_violation_ns,
            real.NVML_PERF_POLICY_THERMAL: gpu.thermal_violation_ns,
        }.get(policy, 0)
        return violation

    @api
    def nvmlDeviceGetPcieReplayCounter(t: Target, gpu: FakeGpu) -> int:
        return whole(t, gpu).pcie_replay

    @api
    def nvmlDeviceGetPcieThroughput(t: Target, gpu: FakeGpu, counter: int) -> int:
        need(whole(t, gpu), "pcie_throughput")
        time.sleep(PCIE_SAMPLE_S)
        return gpu.pcie_tx_kbs if counter == real.NVML_PCIE_UTIL_TX_BYTES else gpu.pcie_rx_kbs

    @api
    def nvmlDeviceGetTotalEccErrors(t: Target, gpu: FakeGpu, error_type: int, counter_type: int) -> int:
        need(whole(t, gpu), "ecc")
        return gpu.ecc_corrected if error_type == real.NVML_MEMORY_ERROR_TYPE_CORRECTED else gpu.ecc_uncorrected

    @api
    def nvmlDeviceGetEncoderUtilization(t: Target, gpu: FakeGpu) -> list[int]:
        need(whole(t, gpu), "video")
        return [gpu.enc_util, 167_000]  # percent, and the period (µs) it was averaged over

    @api
    def nvmlDeviceGetDecoderUtilization(t: Target, gpu: FakeGpu) -> list[int]:
        need(whole(t, gpu), "video")
        return [gpu.dec_util, 167_000]

    @api
    def nvmlDeviceGetSerial(t: Target, gpu: FakeGpu) -> str:
        need(whole(t, gpu), "serial")
        return gpu.serial

    @api
    def nvmlDeviceGetVirtualizationMode(t: Target, gpu: FakeGpu) -> int:
        need(whole(t, gpu), "vgpu")
        return gpu.virtualization_mode

    @api
    def nvmlDeviceGetGridLicensableFeatures(t: Target, gpu: FakeGpu) -> Any:
        need(whole(t, gpu), "vgpu")
        if gpu.virtualization_mode != real.NVML_GPU_VIRTUALIZATION_MODE_VGPU:
            fail(real.NVML_ERROR_NOT_SUPPORTED)
        features = real.c_nvmlGridLicensableFeatures_v4_t()
        features.isGridLicenseSupported = 1
        features.licensableFeaturesCount = 1
        features.gridLicensableFeatures[0].featureCode = real.NVML_GRID_LICENSE_FEATURE_CODE_VGPU
        features.gridLicensableFeatures[0].featureState = gpu.vgpu_license_state
        return features

    @api
    def nvmlDeviceGetRemappedRows(t: Target, gpu: FakeGpu) -> tuple[int, int, int, int]:
        need(whole(t, gpu), "remapped_rows")
        if gpu.mig_enabled:
            fail(real.NVML_ERROR_NOT_SUPPORTED)  # "If MIG is enabled"
        return gpu.remapped_rows

    @api
    def nvmlDeviceGetFieldValues(t: Target, gpu: FakeGpu, field_ids: list[Any]) -> Any:
        values = (real.c_nvmlFieldValue_t * len(field_ids))()
        view = np.frombuffer(memoryview(values), dtype=field_dtype(real.c_nvmlFieldValue_t))  # filled as C would
        requested = [r if isinstance(r, tuple) else (r, 0) for r in field_ids]
        ids = np.array([r[0] for r in requested], dtype=np.uint32)
        scopes = np.array([r[1] for r in requested], dtype=np.uint32)
        view["fieldId"], view["scopeId"] = ids, scopes
        view["nvmlReturn"] = real.NVML_ERROR_NOT_SUPPORTED
        now_us = int(time.time() * 1e6)
        view["timestamp"] = now_us
        whole(t, gpu)
        if "memory_temp" not in gpu.unsupported:
            _set(view, ids == real.NVML_FI_DEV_MEMORY_TEMP, real.NVML_VALUE_TYPE_UNSIGNED_INT, "ui", gpu.mem_temp_c)
        if "recovery_action" not in gpu.unsupported:  # else NOT_SUPPORTED, as a driver that lacks the field
            recovery = ids == real.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
            _set(view, recovery, real.NVML_VALUE_TYPE_UNSIGNED_INT, "ui", gpu.recovery_action)
        if "pcie_counters" not in gpu.unsupported:
            elapsed_us = now_us - int(state["t0"] * 1e6) + 3_600 * 10**6  # the driver was loaded before us
            for field_id, kbs in (
                (real.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, gpu.pcie_tx_kbs),
                (real.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, gpu.pcie_rx_kbs),
            ):
                count = kbs * 1024 * elapsed_us // 10**6
                _set(view, ids == field_id, real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ull", count)
        if "nvlink" not in gpu.unsupported:
            _set(view, ids == real.NVML_FI_DEV_NVLINK_LINK_COUNT, real.NVML_VALUE_TYPE_UNSIGNED_INT, "ui", gpu.nvlinks)
            answering = (scopes < gpu.nvlinks) & ~np.isin(scopes, list(gpu.failing_links))
            links = np.arange(gpu.nvlinks, dtype=np.uint64)
            for field_id, base in (
                (real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, gpu.nvlink_tx_kib),
                (real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, gpu.nvlink_rx_kib),
            ):
                asked = ids == field_id
                _set(
                    view,
                    asked & answering,
                    real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                    "ull",
                    base + scopes.astype(np.uint64),
                )
                view["nvmlReturn"][asked & (scopes < gpu.nvlinks) & ~answering] = real.NVML_ERROR_UNKNOWN
                if "nvlink_aggregate" not in gpu.unsupported:
                    total = int((base + links).sum())  # "A scopeId of UINT_MAX returns aggregate value"
                    _set(view, asked & (scopes == UINT_MAX), real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ull", total)
        return values

    @api
    def nvmlDeviceGetNvLinkErrorCounter(t: Target, gpu: FakeGpu, link: int, counter: int) -> int:
        need(whole(t, gpu), "nvlink")
        if link >= gpu.nvlinks:
            fail(real.NVML_ERROR_INVALID_ARGUMENT)
        if counter in gpu.nvlink_counters_unsupported:
            fail(real.NVML_ERROR_NOT_SUPPORTED)
        if link in gpu.failing_links:
            fail(real.NVML_ERROR_UNKNOWN)
        return gpu.nvlink_errors.get(counter, 0)

    # --- GPU performance monitoring (Hopper and later) ---

    @api
    def nvmlGpmQueryDeviceSupport(t: Target, gpu: FakeGpu) -> Any:
        support = real.c_nvmlGpmSupport_t()
        support.version = real.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = 0 if "gpm" in whole(t, gpu).unsupported else 1
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
    def nvmlGpmSampleGet(t: Target, gpu: FakeGpu, sample: Any) -> Any:
        need(whole(t, gpu), "gpm")
        key = _sample_key(sample)
        state["samples"][key] = (state["samples"][key][0], gpu)
        return sample

    @api
    def nvmlGpmMigSampleGet(t: Target, gpu: FakeGpu, gpu_instance_id: int, sample: Any) -> Any:
        need(whole(t, gpu), "gpm")
        if not gpu.mig_enabled:
            fail(real.NVML_ERROR_NOT_SUPPORTED)
        instance = next((m for m in gpu.mig_devices if m.gpu_instance_id == gpu_instance_id), None)
        if instance is None:
            fail(real.NVML_ERROR_NOT_FOUND)
        key = _sample_key(sample)
        state["samples"][key] = (state["samples"][key][0], instance)
        return sample

    @api
    def nvmlGpmMetricsGet(metrics_get: Any) -> Any:
        if metrics_get.version != real.NVML_GPM_METRICS_GET_VERSION:
            fail(real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        source = state["samples"][_sample_key(metrics_get.sample2)][1]
        if source is None or state["samples"][_sample_key(metrics_get.sample1)][1] is not source:
            fail(real.NVML_ERROR_INVALID_ARGUMENT)
        for i in range(metrics_get.numMetrics):
            metric = metrics_get.metrics[i]
            metric.nvmlReturn = real.NVML_SUCCESS
            if metric.metricId == real.NVML_GPM_METRIC_SM_UTIL:
                metric.value = source.gpm_sm_util
            elif metric.metricId == real.NVML_GPM_METRIC_ANY_TENSOR_UTIL:
                metric.value = source.gpm_tensor_util
            elif metric.metricId == real.NVML_GPM_METRIC_GRAPHICS_UTIL:
                metric.value = source.gpm_graphics_util
            elif metric.metricId == real.NVML_GPM_METRIC_DRAM_BW_UTIL:
                metric.value = source.gpm_dram_bw_util
            else:
                metric.nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED
        return metrics_get

    # --- processes ---

    @api
    def nvmlDeviceGetComputeRunningProcesses(t: Target, gpu: FakeGpu) -> list[Any]:
        if isinstance(t, FakeMigDevice):
            owners: list[tuple[list[int], FakeMigDevice | None]] = [(t.processes, t)]
        elif gpu.mig_enabled and not gpu.privileged:
            return fail(real.NVML_ERROR_NO_PERMISSION)
        else:
            owners = [(gpu.processes, None)] + [(m.processes, m) for m in gpu.mig_devices]
        out = []
        for pids, mig in owners:
            for pid in pids:
                info = real.c_nvmlProcessInfo_t()
                info.pid, info.usedGpuMemory = pid, 1 * GIB
                info.gpuInstanceId = mig.gpu_instance_id if mig else 0xFFFFFFFF
                info.computeInstanceId = mig.compute_instance_id if mig else 0xFFFFFFFF
                out.append(real.nvmlStructToFriendlyObject(info))
        return out

    register_mig_calls(api, handles)
    fake.nvmlDeviceGetAttributes_v2 = fake.nvmlDeviceGetAttributes  # type: ignore[attr-defined]

    # --- XID events ---

    @api
    def nvmlEventSetCreate() -> FakeEventSet:
        event_set = FakeEventSet()
        state["event_sets"].append(event_set)
        return event_set

    @api
    def nvmlDeviceRegisterEvents(t: Target, gpu: FakeGpu, event_types: int, event_set: FakeEventSet) -> None:
        need(whole(t, gpu), "events")
        event_set.register(gpu)

    @api
    def nvmlEventSetWait(event_set: FakeEventSet, timeout_ms: int) -> Any:
        gpu, xid = event_set.wait(timeout_ms)
        return event_data(handles.handle(gpu, gpu), xid)

    fake.nvmlEventSetWait_v2 = nvmlEventSetWait  # type: ignore[attr-defined]

    @api
    def nvmlEventSetFree(event_set: FakeEventSet) -> None:
        event_set.free()
        state["event_sets"].remove(event_set)

    def raise_xid(gpu: FakeGpu, xid: int) -> None:
        """Test hook: the driver reports XID `xid` (999: one it could not identify) on `gpu`."""
        for event_set in state["event_sets"]:
            event_set.post(gpu, xid)

    def lose(gpu: FakeGpu) -> None:
        """Test hook: `gpu` falls off the bus now (waiting event sets notice at once)."""
        gpu.lost = True
        for event_set in state["event_sets"]:
            event_set.wake()

    fake.raise_xid = raise_xid  # type: ignore[attr-defined]
    fake.lose = lose  # type: ignore[attr-defined]
    return fake


def _set(view: np.ndarray, where: np.ndarray, value_type: int, member: str, value: Any) -> None:
    view["valueType"][where] = value_type
    view[member][where] = value[where] if isinstance(value, np.ndarray) else value
    view["nvmlReturn"][where] = real.NVML_SUCCESS


def _sample_key(sample: Any) -> int:
    return int(ctypes.cast(sample, ctypes.POINTER(ctypes.c_uint64)).contents.value)
