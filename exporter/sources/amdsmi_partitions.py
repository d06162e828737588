"""Which amdsmi handles are partitions of one GPU (MI300X in DPX or CPX mode), and their numbers.

A partitioned GPU gives one handle per partition, all with the GPU's PCI device (amdsmi 6.2 takes the
BDF from libdrm; from 6.3 from KFD, where older kernels put the partition in the function number) and
its UUID. So handles are grouped by domain:bus:device; a group of one is a whole GPU.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from types import ModuleType
from typing import Any


def physical_bdf(bdf: str) -> str:
    """The partitioned GPU's own PCI address: function 0 of its device."""
    return f"{_device(bdf)}.0"


def partition_numbers(smi: ModuleType, handles: Sequence[Any], bdfs: Sequence[str]) -> list[int | None]:
    """Per handle: None for a whole GPU, else its partition number within its GPU."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, bdf in enumerate(bdfs):
        groups[_device(bdf)].append(i)
    numbers: list[int | None] = [None] * len(handles)
    for members in groups.values():
        if len(members) < 2:
            continue
        reported = [_reported(smi, handles[i]) for i in members]
        if None in reported or len(set(reported)) != len(members):
            # 6.2 has no amdsmi_get_gpu_kfd_info; it lists a GPU's partitions in order.
            reported = list(range(len(members)))
        for i, number in zip(members, reported, strict=True):
            numbers[i] = number
    return numbers


def _device(bdf: str) -> str:
    return bdf.rsplit(".", 1)[0]


def _reported(smi: ModuleType, handle: Any) -> int | None:
    """The partition number the library reports (current_partition_id, from 6.3), if it does."""
    kfd_info = getattr(smi, "amdsmi_get_gpu_kfd_info", None)
    if kfd_info is None:
        return None
    try:
        number = kfd_info(handle).get("current_partition_id")
    except smi.AmdSmiException:
        return None
    return number if isinstance(number, int) and not isinstance(number, bool) else None
