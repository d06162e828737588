"""Which of this node's GPUs (or MIG devices) a Kubernetes device id names.

Device plugins and DRA drivers name devices in several ways; each is matched to what NVML or amdsmi
reports about the GPU:
- NVIDIA device plugin, default `--device-id-strategy=uuid`: the GPU's UUID ("GPU-…"), a MIG device's
  own UUID ("MIG-…"); with time-slicing each replica gets "<uuid>::<n>" (one GPU, several pods).
- NVIDIA device plugin `--device-id-strategy=index`: "3" (GPU index), "3:1" (the second MIG device of GPU 3).
- AMD's device plugin: the GPU's PCI address ("0000:c1:00.0"), compared with the domain at 4 or 8 digits.
- NVIDIA's DRA driver: device names "gpu-3" (whole GPU 3); "gpu-3-mig-…" names a MIG slice of GPU 3
  without saying which instance, so it is not attributed (see docs/kubernetes-attribution.md).
"""

from __future__ import annotations

import re

_PCI = re.compile(r"^([0-9a-f]{1,8}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")
_INDEX = re.compile(r"^(\d{1,4})$")
_MIG_INDEX = re.compile(r"^(\d{1,4}):(\d{1,3})$")
_DRA_GPU = re.compile(r"^gpu-(\d{1,4})$")
DRA_MIG = re.compile(r"^gpu-(\d{1,4})-mig-")


def key(device_id: str) -> str:
    """The form device ids and GPU identities are compared in: lower case, no time-slicing replica
    suffix, PCI domains at 4 digits."""
    text = device_id.strip().lower().split("::", 1)[0]
    pci = _PCI.match(text)
    if pci:
        domain, bus, device, function = pci.groups()
        return f"{int(domain, 16):04x}:{bus}:{device}.{function}"
    return text


def gpu_keys(index: int, uuid: str, pci_bus_id: str) -> tuple[str, ...]:
    """Every key that names this whole GPU ("" identities, of a GPU not opened, name nothing)."""
    keys = [f"#gpu{index}"]
    keys += [key(name) for name in (uuid, pci_bus_id) if name]
    return tuple(keys)


def mig_keys(gpu_index: int, position: int, uuid: str) -> tuple[str, ...]:
    """Every key that names the `position`-th MIG device of a GPU."""
    return (f"#mig{gpu_index}:{position}", key(uuid)) if uuid else (f"#mig{gpu_index}:{position}",)


def plugin_key(resource: str, device_id: str) -> str:
    """A device plugin's id as a key. Bare indices are GPU indices only for GPU resources: other plugins
    (RDMA, FPGA) number their own devices from 0 too."""
    text = key(device_id)
    if "gpu" in resource.lower() or "mig" in resource.lower():
        if _INDEX.match(text):
            return f"#gpu{int(text)}"
        mig = _MIG_INDEX.match(text)
        if mig:
            return f"#mig{int(mig.group(1))}:{int(mig.group(2))}"
    return text


def claim_key(device_name: str) -> str:
    """A DRA device name as a key: "gpu-N" is GPU N; anything else is compared as it is (a UUID, a PCI
    address)."""
    text = key(device_name)
    gpu = _DRA_GPU.match(text)
    return f"#gpu{int(gpu.group(1))}" if gpu else text
