"""The fake NVML's MIG calls: a GPU in MIG mode and its MIG devices, each with a handle of its own."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import pynvml as real

from gpuscope.exporter.testing.fake_nvml_gpus import FakeGpu, FakeMigDevice
from gpuscope.exporter.testing.fake_nvml_handles import FakeHandles, Target, fail, mig_only, need, whole

MAX_MIG_DEVICES = 7  # what an A100 or H100 reports to nvmlDeviceGetMaxMigDeviceCount in MIG mode


def register_mig_calls(api: Callable[[Callable[..., Any]], Any], handles: FakeHandles) -> None:
    @api
    def nvmlDeviceGetMigMode(t: Target, gpu: FakeGpu) -> list[int]:
        need(whole(t, gpu), "mig")
        mode = real.NVML_DEVICE_MIG_ENABLE if gpu.mig_enabled else real.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    @api
    def nvmlDeviceGetMaxMigDeviceCount(t: Target, gpu: FakeGpu) -> int:
        return MAX_MIG_DEVICES if whole(t, gpu).mig_enabled and "mig" not in gpu.unsupported else 0

    @api
    def nvmlDeviceGetMigDeviceHandleByIndex(t: Target, gpu: FakeGpu, index: int) -> Any:
        need(whole(t, gpu), "mig")
        if not gpu.mig_enabled:
            fail(real.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= index < len(gpu.mig_devices):
            fail(real.NVML_ERROR_NOT_FOUND)
        return handles.handle(gpu.mig_devices[index], gpu)

    @api
    def nvmlDeviceIsMigDeviceHandle(t: Target, gpu: FakeGpu) -> Any:
        return ctypes.c_uint(1 if isinstance(t, FakeMigDevice) else 0)

    @api
    def nvmlDeviceGetGpuInstanceId(t: Target, gpu: FakeGpu) -> int:
        return mig_only(t).gpu_instance_id

    @api
    def nvmlDeviceGetComputeInstanceId(t: Target, gpu: FakeGpu) -> int:
        return mig_only(t).compute_instance_id

    @api
    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(t: Target, gpu: FakeGpu) -> Any:
        mig_only(t)
        return handles.handle(gpu, gpu)

    @api
    def nvmlDeviceGetAttributes(t: Target, gpu: FakeGpu) -> Any:
        mig = mig_only(t)  # "This API currently only supports MIG device handles"
        attributes = real.c_nvmlDeviceAttributes()
        attributes.gpuInstanceSliceCount = mig.gpu_slices
        attributes.computeInstanceSliceCount = mig.compute_slices
        attributes.multiprocessorCount = 16 * mig.compute_slices
        attributes.memorySizeMB = mig.memory_mib
        return attributes
