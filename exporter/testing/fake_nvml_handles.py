"""Device handles as the real binding hands them out (c_nvmlDevice_t pointers, a new Python object on
every call, the same address for the same device, so only the address says which device it is), and
the checks the fake's calls make on the device a handle names."""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml as real

from gpuscope.exporter.testing.fake_nvml_gpus import FakeGpu, FakeMigDevice

Target = FakeGpu | FakeMigDevice


class FakeHandles:
    def __init__(self) -> None:
        self._cells: dict[int, ctypes.Array[ctypes.c_char]] = {}  # id(target) -> the memory a handle points at
        self._targets: dict[int, tuple[Target, FakeGpu]] = {}  # address -> (device, the GPU it is on)
        # Handles given out to keep, (so their ids stay theirs): callers keep a GPU's handle
        # and pass it to every call, and the binding costs C nothing to look it up, so neither should we.
        self._given: dict[int, tuple[Any, Target, FakeGpu]] = {}

    def handle(self, target: Target, gpu: FakeGpu, kept: bool = False) -> Any:
        """A handle to `target`; `kept`: one the caller will keep and pass to every call."""
        cell = self._cells.get(id(target))
        if cell is None:
            cell = self._cells[id(target)] = ctypes.create_string_buffer(8)
            self._targets[ctypes.addressof(cell)] = (target, gpu)
        handle = ctypes.cast(cell, real.c_nvmlDevice_t)
        if kept:
            self._given[id(handle)] = (handle, target, gpu)
        return handle

    def resolve(self, handle: Any) -> tuple[Target, FakeGpu]:
        """(the device, the GPU it is on) for a handle; NVML_ERROR_INVALID_ARGUMENT for anything else."""
        given = self._given.get(id(handle))
        if given is not None and given[0] is handle:
            return given[1], given[2]
        found = self._targets.get(ctypes.cast(handle, ctypes.c_void_p).value or 0)
        if found is None:
            raise real.NVMLError(real.NVML_ERROR_INVALID_ARGUMENT)
        return found


def fail(code: int) -> Any:
    raise real.NVMLError(code)  # maps to the real subclass, e.g. NVMLError_NotSupported


def need(gpu: FakeGpu, feature: str) -> None:
    if feature in gpu.unsupported:
        fail(real.NVML_ERROR_NOT_SUPPORTED)


def whole(t: Target, gpu: FakeGpu) -> FakeGpu:
    """The GPU, for calls that take a whole GPU's handle: a MIG device handle is not one."""
    if isinstance(t, FakeMigDevice):
        fail(real.NVML_ERROR_INVALID_ARGUMENT)
    return gpu


def mig_only(t: Target) -> FakeMigDevice:
    if not isinstance(t, FakeMigDevice):
        fail(real.NVML_ERROR_INVALID_ARGUMENT)
    assert isinstance(t, FakeMigDevice)
    return t
