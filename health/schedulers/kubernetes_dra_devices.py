"""The GPUs a node publishes for Dynamic Resource Allocation, read from its ResourceSlices (plain dicts as
the API server returns them): which device is the GPU gpuscope's evidence names, by uuid or by index.

NVIDIA's DRA driver (`gpu.nvidia.com`) publishes one device per whole GPU, named `gpu-<minor>`, with the
attributes `type` ("gpu"; "mig" for a MIG device), `uuid` and, in some driver versions, `index`. The device
name is never read as an index: the minor number it carries need not be NVML's index."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

GPU_DRIVER = "gpu.nvidia.com"
WHOLE_GPU = "gpu"  # the `type` attribute of a whole GPU


@dataclass(frozen=True)
class GpuDevice:
    driver: str  # slice.spec.driver
    pool: str  # slice.spec.pool.name
    name: str  # slice.spec.devices[].name, what a DeviceTaintRule's selector names
    uuid: str | None
    index: int | None

    def __str__(self) -> str:
        return f"{self.name} ({self.uuid or 'no uuid'})"


def gpu_devices(slices: Iterable[dict[str, Any]]) -> list[GpuDevice]:
    """Every whole GPU in these ResourceSlices, in the order they are published."""
    found = []
    for item in slices:
        spec = item.get("spec") or {}
        driver = spec.get("driver", "")
        if driver != GPU_DRIVER:
            continue
        pool = (spec.get("pool") or {}).get("name", "")
        for device in spec.get("devices") or []:
            attributes = _attributes(device, driver)
            if attributes.get("type", WHOLE_GPU) != WHOLE_GPU:
                continue
            uuid = attributes.get("uuid")
            index = attributes.get("index")
            found.append(GpuDevice(driver, pool, device["name"], uuid if isinstance(uuid, str) else None,
                                   index if isinstance(index, int) else None))  # fmt: skip
    return found


def find_gpu(devices: Iterable[GpuDevice], uuid: str | None, index: int | None) -> GpuDevice | None:
    """The device of the GPU with this uuid; without a uuid, the one whose `index` attribute is `index`."""
    devices = list(devices)
    if uuid:
        return next((d for d in devices if d.uuid is not None and d.uuid.lower() == uuid.lower()), None)
    if index is not None:
        return next((d for d in devices if d.index == index), None)
    return None


def _attributes(device: dict[str, Any], driver: str) -> dict[str, Any]:
    # resource.k8s.io/v1beta1 wraps a device's fields in `basic`; v1beta2 and v1 do not. A name may be
    # qualified with the driver's domain (`gpu.nvidia.com/uuid`), which is the same attribute.
    raw = (device.get("basic") or device).get("attributes") or {}
    values = {}
    for name, value in raw.items():
        plain = name.removeprefix(f"{driver}/")
        if isinstance(value, dict) and value:
            values[plain] = next(iter(value.values()))  # {"string": ...} | {"int": ...} | {"bool": ...} | ...
    return values
