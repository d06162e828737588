"""A fake `amdsmi` module: the names, exception classes, enums, return shapes and units of the real
package (amdsmi 7.x), backed by FakeAmdGpu objects.

Real amdsmi reports a value a GPU cannot give either by raising AmdSmiLibraryException with
AMDSMI_STATUS_NOT_SUPPORTED or by putting "N/A" in a returned dict; the fake does both. Units: power in
W, energy as an accumulator times a resolution in µJ, temperatures in °C, clocks in MHz, memory in
bytes, XGMI read/write in KB.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

GIB = 2**30


class _Status:
    AMDSMI_STATUS_SUCCESS = 0
    AMDSMI_STATUS_INVAL = 1
    AMDSMI_STATUS_NOT_SUPPORTED = 2
    AMDSMI_STATUS_NOT_YET_IMPLEMENTED = 3
    AMDSMI_STATUS_DRM_ERROR = 6
    AMDSMI_STATUS_NO_PERM = 10
    AMDSMI_STATUS_INIT_ERROR = 18
    AMDSMI_STATUS_NOT_FOUND = 31
    AMDSMI_STATUS_NOT_INIT = 32
    AMDSMI_STATUS_NO_DRV = 51


class AmdSmiException(Exception):
    pass


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code

    def get_error_code(self) -> int:
        return self.err_code

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code}"


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0


class AmdSmiClkType(IntEnum):
    SYS = 0
    GFX = 0
    MEM = 4


class AmdSmiMemoryType(IntEnum):
    VRAM = 0


@dataclass
class FakeAmdGpu:
    uuid: str
    bdf: str = "0000:05:00.0"
    market_name: str = "AMD Instinct MI300X"
    gfx_activity: int = 95
    umc_activity: int = 40
    socket_power_w: int = 640
    power_limit_w: int = 750
    energy_accumulator: int = 152_000_000_000
    energy_resolution_uj: float = 15.259
    hotspot_c: int = 74
    vram_c: int = 68
    gfx_clock: int = 2100
    mem_clock: int = 1300
    vram_total: int = 192 * GIB
    vram_used: int = 150 * GIB
    correctable: int = 0
    uncorrectable: int = 0
    pci_replay: int = 0
    xgmi_links: int = 7
    xgmi_read_kb: int = 5_000_000
    xgmi_write_kb: int = 6_000_000
    unsupported: set[str] = field(default_factory=set)  # "power" (as "N/A"), "vram_temp", "ecc", "xgmi", "energy"
    lost: bool = False


class _Handle:
    def __init__(self, gpu: FakeAmdGpu) -> None:
        self.gpu = gpu


def make_fake_amdsmi(gpus: list[FakeAmdGpu], *, driver: bool = True) -> types.ModuleType:
    fake = types.ModuleType("amdsmi")
    for cls in (
        AmdSmiException,
        AmdSmiLibraryException,
        AmdSmiTemperatureType,
        AmdSmiTemperatureMetric,
        AmdSmiClkType,
        AmdSmiMemoryType,
    ):
        setattr(fake, cls.__name__, cls)
    fake.amdsmi_wrapper = _Status  # type: ignore[attr-defined]
    state = {"init": False}

    def check(h: Any = None, feature: str | None = None) -> FakeAmdGpu | None:
        if not state["init"]:
            raise AmdSmiLibraryException(_Status.AMDSMI_STATUS_NOT_INIT)
        if h is None:
            return None
        if h.gpu.lost:
            raise AmdSmiLibraryException(_Status.AMDSMI_STATUS_NOT_FOUND)
        if feature in h.gpu.unsupported:
            raise AmdSmiLibraryException(_Status.AMDSMI_STATUS_NOT_SUPPORTED)
        return h.gpu

    def api(fn: Any) -> Any:
        setattr(fake, fn.__name__, fn)
        return fn

    @api
    def amdsmi_init(flag: int = 0) -> None:
        if not driver:
            raise AmdSmiLibraryException(_Status.AMDSMI_STATUS_DRM_ERROR)
        state["init"] = True

    @api
    def amdsmi_shut_down() -> None:
        state["init"] = False

    @api
    def amdsmi_get_processor_handles() -> list[_Handle]:
        check()
        return [_Handle(g) for g in gpus]

    @api
    def amdsmi_get_gpu_device_uuid(h: _Handle) -> str:
        return check(h).uuid  # type: ignore[union-attr]

    @api
    def amdsmi_get_gpu_device_bdf(h: _Handle) -> str:
        return check(h).bdf  # type: ignore[union-attr]

    @api
    def amdsmi_get_gpu_asic_info(h: _Handle) -> dict[str, Any]:
        gpu = check(h)
        assert gpu is not None
        return {"market_name": gpu.market_name, "vendor_id": "0x1002", "device_id": "0x74a1"}

    @api
    def amdsmi_get_gpu_activity(h: _Handle) -> dict[str, Any]:
        gpu = check(h)
        assert gpu is not None
        return {"gfx_activity": gpu.gfx_activity, "umc_activity": gpu.umc_activity, "mm_activity": "N/A"}

    @api
    def amdsmi_get_power_info(h: _Handle) -> dict[str, Any]:
        gpu = check(h)
        assert gpu is not None
        na = "power" in gpu.unsupported
        return {
            "socket_power": "N/A" if na else gpu.socket_power_w,
            "current_socket_power": "N/A" if na else gpu.socket_power_w,
            "average_socket_power": "N/A",
            "gfx_voltage": "N/A",
            "soc_voltage": "N/A",
            "mem_voltage": "N/A",
            "power_limit": "N/A" if na else gpu.power_limit_w,
        }

    @api
    def amdsmi_get_energy_count(h: _Handle) -> dict[str, Any]:
        gpu = check(h, "energy")
        assert gpu is not None
        return {
            "energy_accumulator": gpu.energy_accumulator,
            "counter_resolution": gpu.energy_resolution_uj,
            "timestamp": 0,
        }

    @api
    def amdsmi_get_temp_metric(h: _Handle, sensor: AmdSmiTemperatureType, metric: AmdSmiTemperatureMetric) -> int:
        gpu = check(h, "vram_temp" if sensor == AmdSmiTemperatureType.VRAM else None)
        assert gpu is not None
        return gpu.vram_c if sensor == AmdSmiTemperatureType.VRAM else gpu.hotspot_c

    @api
    def amdsmi_get_clock_info(h: _Handle, clock: AmdSmiClkType) -> dict[str, Any]:
        gpu = check(h)
        assert gpu is not None
        clk = gpu.mem_clock if clock == AmdSmiClkType.MEM else gpu.gfx_clock
        return {"clk": clk, "min_clk": 500, "max_clk": 2100, "clk_locked": "N/A", "clk_deep_sleep": 0}

    @api
    def amdsmi_get_gpu_memory_total(h: _Handle, mem: AmdSmiMemoryType) -> int:
        return check(h).vram_total  # type: ignore[union-attr]

    @api
    def amdsmi_get_gpu_memory_usage(h: _Handle, mem: AmdSmiMemoryType) -> int:
        return check(h).vram_used  # type: ignore[union-attr]

    @api
    def amdsmi_get_gpu_total_ecc_count(h: _Handle) -> dict[str, int]:
        gpu = check(h, "ecc")
        assert gpu is not None
        return {"correctable_count": gpu.correctable, "uncorrectable_count": gpu.uncorrectable, "deferred_count": 0}

    @api
    def amdsmi_get_gpu_pci_replay_counter(h: _Handle) -> int:
        return check(h).pci_replay  # type: ignore[union-attr]

    @api
    def amdsmi_get_link_metrics(h: _Handle) -> dict[str, Any]:
        gpu = check(h, "xgmi")
        assert gpu is not None
        links = [
            {
                "bdf": "0000:00:00.0",
                "bit_rate": 32,
                "max_bandwidth": 64,
                "link_type": 2,
                "read": gpu.xgmi_read_kb + i if i < gpu.xgmi_links else 0,
                "write": gpu.xgmi_write_kb + i if i < gpu.xgmi_links else 0,
            }
            for i in range(8)
        ]
        return {"num_links": gpu.xgmi_links, "links": links}

    @api
    def amdsmi_get_gpu_process_list(h: _Handle) -> list[dict[str, Any]]:
        check(h)
        return []

    return fake


def mi300x_node(gpus: int = 8) -> list[FakeAmdGpu]:
    return [
        FakeAmdGpu(uuid=f"{i:02x}ff74a1-0000-1000-80fe-bd3a0a6ee0c4", bdf=f"0000:{0x05 + 0x10 * i:02x}:00.0")
        for i in range(gpus)
    ]
