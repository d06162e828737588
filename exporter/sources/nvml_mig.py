"""MIG (Multi-Instance GPU): the MIG devices of a GPU in MIG mode, read per GPU instance.

What NVML gives in MIG mode (nvml.h): the GPU's handle answers NOT_SUPPORTED for utilisation and
remapped rows, and NO_PERMISSION for memory and the process list unless the caller is privileged.
Each MIG device (a compute instance in a GPU instance) has a handle of its own, which answers for its
UUID, name, memory (its GPU instance's) and processes without privileges; GPM measures activity per
GPU instance (Hopper and later). The GPU's power, temperature, clocks, energy, ECC, NVLink and PCIe
readings stay with the GPU. docs/mig.md lists what no API gives per instance.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from gpuscope.exporter.snapshot import MigReading
from gpuscope.exporter.sources.errors import GroupGuard, LogOnce
from gpuscope.exporter.sources.nvml_fields import text
from gpuscope.exporter.sources.nvml_gpm import GpmPair
from gpuscope.exporter.sources.nvml_memory import MemoryReader

log = logging.getLogger(__name__)

GIB = 2**30
MIB = 2**20
# A MIG device's name ends with its profile: "NVIDIA H100 80GB HBM3 MIG 1g.10gb", or with the compute
# instance's share first ("... MIG 1c.3g.40gb") when the GPU instance is split further.
PROFILE_IN_NAME = re.compile(r"MIG (?:(\d+)c\.)?((\d+)g\.\d+gb\S*)$")


@dataclass
class MigDevice:
    handle: Any
    gpu_instance_id: int
    compute_instance_id: int
    uuid: str
    profile: str
    slices: int  # compute slices: the compute instance's own, else its GPU instance's
    guard: GroupGuard
    gpm: GpmPair | None  # on the first compute instance of each GPU instance: activity is per GPU instance
    reports_instance: bool  # the first compute instance of its GPU instance reports the instance's figures


class MigLayout:
    """The MIG devices of one GPU, found again on the slow cadence (instances come and go)."""

    def __init__(
        self,
        nvml: ModuleType,
        handle: Any,
        label: str,
        log_once: LogOnce,
        memory: MemoryReader,
        gpm_request: Any | None,
    ) -> None:
        self._nvml = nvml
        self._handle = handle
        self._label = label
        self._log_once = log_once
        self._memory = memory
        self._gpm_request = gpm_request  # None: the GPU has no GPM
        self.devices: list[MigDevice] = []
        # The most MIG devices the GPU can hold: one per compute slice (7 on A100 and H100, 4 on A30).
        self.gpu_slices = 0

    def discover(self, gpu_memory_bytes: float | None) -> None:
        """Look for the GPU's MIG devices; rebuilt only when they changed."""
        nvml = self._nvml
        handles = []
        self.gpu_slices = int(nvml.nvmlDeviceGetMaxMigDeviceCount(self._handle))
        for index in range(self.gpu_slices):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(self._handle, index)
            except nvml.NVMLError_NotFound:
                continue  # no MIG device at this index (indices need not be dense)
            handles.append((text(nvml.nvmlDeviceGetUUID(mig)), mig))
        if [uuid for uuid, _ in handles] == [d.uuid for d in self.devices]:
            return
        self.free()
        for uuid, mig in handles:
            self.devices.append(self._describe(uuid, mig, gpu_memory_bytes))
        self.devices.sort(key=lambda d: (d.gpu_instance_id, d.compute_instance_id))
        seen: set[int] = set()
        for device in self.devices:
            device.reports_instance = device.gpu_instance_id not in seen
            seen.add(device.gpu_instance_id)
            if device.reports_instance and self._gpm_request is not None:
                device.gpm = self._gpm_pair(device.gpu_instance_id)
        log.info("%s: MIG devices %s", self._label, ", ".join(f"{d.gpu_instance_id}:{d.profile}" for d in self.devices))

    def read(self) -> tuple[MigReading, ...]:
        readings = []
        for device in self.devices:
            values: dict[str, float] = {}
            if device.reports_instance:
                device.guard.run("memory", self._read_memory, device, values)
                if device.gpm is not None:
                    device.guard.run("gpm", self._read_gpm, device, values)
            readings.append(
                MigReading(
                    device.gpu_instance_id,
                    device.compute_instance_id,
                    device.profile,
                    device.uuid,
                    device.slices,
                    max(self.gpu_slices, device.slices),
                    values,
                )
            )
        return tuple(readings)

    def running_pids(self) -> dict[str, list[int]]:
        """MIG device UUID -> PIDs of its compute processes (no privileges needed, unlike the GPU's list)."""
        nvml = self._nvml
        found = {}
        for device in self.devices:
            try:
                found[device.uuid] = [int(p.pid) for p in nvml.nvmlDeviceGetComputeRunningProcesses(device.handle)]
            except nvml.NVMLError:
                found[device.uuid] = []
        return found

    def reset(self) -> None:
        for device in self.devices:
            if device.gpm is not None:
                device.gpm.reset()

    def free(self) -> None:
        for device in self.devices:
            if device.gpm is not None:
                device.gpm.free()
        self.devices = []

    def _describe(self, uuid: str, mig: Any, gpu_memory_bytes: float | None) -> MigDevice:
        nvml = self._nvml
        gpu_instance = int(nvml.nvmlDeviceGetGpuInstanceId(mig))
        compute_instance = int(nvml.nvmlDeviceGetComputeInstanceId(mig))
        named = _profile_from_name(text(nvml.nvmlDeviceGetName(mig)))
        if named is None:
            attributes = nvml.nvmlDeviceGetAttributes(mig)
            profile = profile_from_attributes(
                int(attributes.gpuInstanceSliceCount), int(attributes.memorySizeMB), gpu_memory_bytes
            )
            slices = int(attributes.computeInstanceSliceCount)
        else:
            profile, slices = named
        label = f"{self._label} MIG {gpu_instance}/{compute_instance}"
        guard = GroupGuard(
            label,
            self._log_once,
            errors=nvml.NVMLError,
            is_unsupported=lambda exc: isinstance(exc, (nvml.NVMLError_NotSupported, nvml.NVMLError_NoPermission)),
            passthrough=(nvml.NVMLError_GpuIsLost,),
        )
        return MigDevice(mig, gpu_instance, compute_instance, uuid, profile, slices, guard, None, True)

    def _gpm_pair(self, gpu_instance: int) -> GpmPair | None:
        nvml = self._nvml
        try:
            return GpmPair(nvml, self._gpm_request, lambda s: nvml.nvmlGpmMigSampleGet(self._handle, gpu_instance, s))
        except (nvml.NVMLError, AttributeError) as exc:  # AttributeError: a binding without MIG GPM
            self._log_once((self._label, "mig-gpm"), logging.INFO, "%s: no GPM per MIG instance (%s)", self._label, exc)
            return None

    def _read_memory(self, device: MigDevice, values: dict[str, float]) -> None:
        values["mig_fb_used_bytes"], values["mig_fb_total_bytes"] = self._memory.read(device.handle)

    def _read_gpm(self, device: MigDevice, values: dict[str, float]) -> None:
        assert device.gpm is not None
        for key, value in device.gpm.read().items():
            values[f"mig_{key}"] = value


def _profile_from_name(name: str) -> tuple[str, int] | None:
    """The GPU instance profile and the device's compute slices ("... MIG 1c.3g.40gb": ("3g.40gb", 1))."""
    match = PROFILE_IN_NAME.search(name)
    if match is None:
        return None
    return match.group(2), int(match.group(1) or match.group(3))


def activity_from_instances(mig: tuple[MigReading, ...], values: dict[str, float]) -> None:
    """A GPU in MIG mode reports no activity of its own: its SM and tensor activity are then its GPU
    instances', each weighted by its share of the GPU's slices (slices in no instance count as idle), so
    the GPU's figure means what it means outside MIG mode: the fraction of the whole GPU at work."""
    for key in ("sm_active_pct", "tensor_active_pct"):
        reported = [(m.values[f"mig_{key}"], m.instance_slices, m.gpu_slices) for m in mig if f"mig_{key}" in m.values]
        if reported and key not in values:
            gpu_slices = max(total for _, _, total in reported)
            values[key] = min(100.0, sum(value * slices for value, slices, _ in reported) / gpu_slices)


def profile_from_attributes(gpu_slices: int, memory_mib: int, gpu_memory_bytes: float | None) -> str:
    """The GPU instance profile's name ("3g.40gb") from its slices and memory, for drivers whose MIG
    device names do not carry it. Profiles are named after eighths of the GPU's memory, rounded up;
    without the GPU's size, the instance's own memory rounded up to whole GiB."""
    if gpu_memory_bytes:
        eighths = math.ceil(memory_mib * MIB / gpu_memory_bytes * 8 - 1e-9) / 8
        gigabytes = round(eighths * math.ceil(gpu_memory_bytes / GIB))
    else:
        gigabytes = math.ceil(memory_mib / 1024)
    return f"{gpu_slices}g.{gigabytes}gb"
