"""A fake `amdsmi` module: the names, exception classes, enums, return shapes and units of the real
package, version by version (`version=` "6.2", "6.3", "6.4" or "7.0"), backed by FakeAmdGpu objects.

What changes between versions (read from the amdsmi sources of each ROCm release branch and its docs):
- amdsmi_get_power_info: 6.2 and 6.3 give current_socket_power (W) and power_limit read from hwmon's
  power1_cap, which is in microwatts (an MI300X's 750 W cap reads 750000000); 6.4 adds socket_power
  ("N/A" on bare metal) and gives power_limit in W; 7.0 fills socket_power (W).
- amdsmi_get_energy_count: the accumulator is under 'power' in 6.2, under both 'power' and
  'energy_accumulator' in 6.3, and only under 'energy_accumulator' from 6.4. Resolution in µJ.
- amdsmi_get_link_metrics is not in the Python package before 6.4 (the C library has it): there the
  per-link XGMI counters come from amdsmi_get_gpu_metrics_info's xgmi_read/write_data_acc (KB).
- amdsmi_get_gpu_kfd_info (with current_partition_id) exists from 6.3.

Real amdsmi reports a value a GPU cannot give either by raising AmdSmiLibraryException with
AMDSMI_STATUS_NOT_SUPPORTED or by putting "N/A" in a returned dict; the fake does both. Like the
real _check_res, RETRY raises AmdSmiRetryException and TIMEOUT AmdSmiTimeoutException (both
AmdSmiLibraryException). Partitions (CPX/DPX on MI300X) are one FakeAmdGpu per partition sharing the
physical GPU's uuid and BDF, as the real library reports them (its UUID comes from the ASIC serial).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

GIB = 2**30
VERSIONS = ("6.2", "6.3", "6.4", "7.0")
LATEST = VERSIONS[-1]


class _Status:
    """The amdsmi_status_t values (amdsmi.h), as amdsmi.amdsmi_wrapper carries them."""

    AMDSMI_STATUS_SUCCESS = 0
    AMDSMI_STATUS_INVAL = 1
    AMDSMI_STATUS_NOT_SUPPORTED = 2
    AMDSMI_STATUS_NOT_YET_IMPLEMENTED = 3
    AMDSMI_STATUS_DRM_ERROR = 6
    AMDSMI_STATUS_API_FAILED = 7
    AMDSMI_STATUS_TIMEOUT = 8
    AMDSMI_STATUS_RETRY = 9
    AMDSMI_STATUS_NO_PERM = 10
    AMDSMI_STATUS_INTERRUPT = 11
    AMDSMI_STATUS_IO = 12
    AMDSMI_STATUS_FILE_ERROR = 14
    AMDSMI_STATUS_INIT_ERROR = 18
    AMDSMI_STATUS_BUSY = 30
    AMDSMI_STATUS_NOT_FOUND = 31
    AMDSMI_STATUS_NOT_INIT = 32
    AMDSMI_STATUS_DRIVER_NOT_LOADED = 34
    AMDSMI_STATUS_NO_DATA = 40
    AMDSMI_STATUS_UNEXPECTED_SIZE = 42
    AMDSMI_STATUS_NO_DRV = 51
    AMDSMI_STATUS_AMDGPU_RESTART_ERR = 54
    AMDSMI_STATUS_UNKNOWN_ERROR = 0xFFFFFFFF


STATUS = _Status
_NAMES = {value: name for name, value in vars(_Status).items() if name.startswith("AMDSMI_STATUS_")}


class AmdSmiException(Exception):
    pass


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code
        self.err_info = _NAMES.get(err_code, "AMDSMI_STATUS_UNKNOWN_ERROR")

    def get_error_code(self) -> int:
        return self.err_code

    def get_error_info(self) -> str:
        return self.err_info

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | {self.err_info}"


class AmdSmiRetryException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(_Status.AMDSMI_STATUS_RETRY)


class AmdSmiTimeoutException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(_Status.AMDSMI_STATUS_TIMEOUT)


def library_error(status: int) -> AmdSmiLibraryException:
    """The exception the real wrapper's _check_res raises for `status`."""
    if status == _Status.AMDSMI_STATUS_RETRY:
        return AmdSmiRetryException()
    if status == _Status.AMDSMI_STATUS_TIMEOUT:
        return AmdSmiTimeoutException()
    return AmdSmiLibraryException(status)


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
    part_number: str = "102-G30211-00"  # amdsmi_get_gpu_board_info's model_number
    product_serial: str = "692251001124"
    partition_id: int = 0  # this handle's partition of the physical GPU (0 in SPX mode)
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
    # "activity", "power" (as "N/A"), "vram_temp", "ecc", "xgmi", "energy", "board": NOT_SUPPORTED (or "N/A")
    unsupported: set[str] = field(default_factory=set)
    lost: bool = False
    lost_status: int = _Status.AMDSMI_STATUS_NOT_FOUND  # what every call on a lost GPU raises
    # The statuses the next calls on this GPU fail with, one per call (None: that call answers): e.g.
    # [BUSY, BUSY] is another process holding the library's device lock for two calls.
    fail_next: list[int | None] = field(default_factory=list)


class _Handle:
    def __init__(self, gpu: FakeAmdGpu) -> None:
        self.gpu = gpu


def _at_least(version: str, minimum: str) -> bool:
    return _parse(version) >= _parse(minimum)


def _parse(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:2])


def make_fake_amdsmi(gpus: Sequence[FakeAmdGpu], *, driver: bool = True, version: str = LATEST) -> types.ModuleType:
    if version not in VERSIONS:
        raise ValueError(f"fake amdsmi versions: {', '.join(VERSIONS)}")
    fake = types.ModuleType("amdsmi")
    fake.__version__ = version  # type: ignore[attr-defined]
    for cls in (
        AmdSmiException,
        AmdSmiLibraryException,
        AmdSmiRetryException,
        AmdSmiTimeoutException,
        AmdSmiTemperatureType,
        AmdSmiTemperatureMetric,
        AmdSmiClkType,
        AmdSmiMemoryType,
    ):
        setattr(fake, cls.__name__, cls)
    fake.amdsmi_wrapper = _Status  # type: ignore[attr-defined]
    state = {"init": False}
    micro_watt_cap = not _at_least(version, "6.4")

    def check(h: _Handle, feature: str | None = None) -> FakeAmdGpu:
        if not state["init"]:
            raise AmdSmiLibraryException(_Status.AMDSMI_STATUS_NOT_INIT)
        gpu = h.gpu
        if gpu.lost:
            raise library_error(gpu.lost_status)
        status = gpu.fail_next.pop(0) if gpu.fail_next else None
        if status is not None:
            raise library_error(status)
        if feature in gpu.unsupported:
            raise AmdSmiLibraryException(_Status.AMDSMI_STATUS_NOT_SUPPORTED)
        return gpu

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
        if not state["init"]:
            raise AmdSmiLibraryException(_Status.AMDSMI_STATUS_NOT_INIT)
        return [_Handle(g) for g in gpus]

    @api
    def amdsmi_get_gpu_device_uuid(h: _Handle) -> str:
        return check(h).uuid

    @api
    def amdsmi_get_gpu_device_bdf(h: _Handle) -> str:
        return check(h).bdf

    @api
    def amdsmi_get_gpu_asic_info(h: _Handle) -> dict[str, Any]:
        return {"market_name": check(h).market_name, "vendor_id": "0x1002", "device_id": "0x74a1"}

    @api
    def amdsmi_get_gpu_board_info(h: _Handle) -> dict[str, Any]:
        gpu = check(h, "board")
        return {
            "model_number": gpu.part_number,
            "product_serial": gpu.product_serial,
            "fru_id": "N/A",
            "product_name": gpu.market_name,
            "manufacturer_name": "AMD",
        }

    if _at_least(version, "6.3"):

        @api
        def amdsmi_get_gpu_kfd_info(h: _Handle) -> dict[str, Any]:
            gpu = check(h)
            return {"kfd_id": 45412 + gpu.partition_id, "node_id": 1, "current_partition_id": gpu.partition_id}

    @api
    def amdsmi_get_gpu_activity(h: _Handle) -> dict[str, Any]:
        gpu = check(h, "activity")
        return {"gfx_activity": gpu.gfx_activity, "umc_activity": gpu.umc_activity, "mm_activity": "N/A"}

    @api
    def amdsmi_get_power_info(h: _Handle) -> dict[str, Any]:
        gpu = check(h)
        na = "power" in gpu.unsupported
        info: dict[str, Any] = {}
        if _at_least(version, "6.4"):
            info["socket_power"] = "N/A" if na or version == "6.4" else gpu.socket_power_w
        limit = gpu.power_limit_w * 1_000_000 if micro_watt_cap else gpu.power_limit_w
        return info | {
            "current_socket_power": "N/A" if na else gpu.socket_power_w,
            "average_socket_power": "N/A",
            "gfx_voltage": "N/A",
            "soc_voltage": "N/A",
            "mem_voltage": "N/A",
            "power_limit": "N/A" if na else limit,
        }

    @api
    def amdsmi_get_energy_count(h: _Handle) -> dict[str, Any]:
        gpu = check(h, "energy")
        keys = {"6.2": ("power",), "6.3": ("power", "energy_accumulator")}.get(version, ("energy_accumulator",))
        counts: dict[str, Any] = dict.fromkeys(keys, gpu.energy_accumulator)
        return counts | {"counter_resolution": gpu.energy_resolution_uj, "timestamp": 0}

    @api
    def amdsmi_get_temp_metric(h: _Handle, sensor: AmdSmiTemperatureType, metric: AmdSmiTemperatureMetric) -> int:
        gpu = check(h, "vram_temp" if sensor == AmdSmiTemperatureType.VRAM else None)
        return gpu.vram_c if sensor == AmdSmiTemperatureType.VRAM else gpu.hotspot_c

    @api
    def amdsmi_get_clock_info(h: _Handle, clock: AmdSmiClkType) -> dict[str, Any]:
        gpu = check(h)
        clk = gpu.mem_clock if clock == AmdSmiClkType.MEM else gpu.gfx_clock
        return {"clk": clk, "min_clk": 500, "max_clk": 2100, "clk_locked": "N/A", "clk_deep_sleep": 0}

    @api
    def amdsmi_get_gpu_memory_total(h: _Handle, mem: AmdSmiMemoryType) -> int:
        return check(h).vram_total

    @api
    def amdsmi_get_gpu_memory_usage(h: _Handle, mem: AmdSmiMemoryType) -> int:
        return check(h).vram_used

    @api
    def amdsmi_get_gpu_total_ecc_count(h: _Handle) -> dict[str, int]:
        gpu = check(h, "ecc")
        return {"correctable_count": gpu.correctable, "uncorrectable_count": gpu.uncorrectable, "deferred_count": 0}

    @api
    def amdsmi_get_gpu_pci_replay_counter(h: _Handle) -> int:
        return check(h).pci_replay

    def xgmi_kb(gpu: FakeAmdGpu, base: int) -> list[Any]:
        return [base + i if i < gpu.xgmi_links else "N/A" for i in range(8)]

    @api
    def amdsmi_get_gpu_metrics_info(h: _Handle) -> dict[str, Any]:
        gpu = check(h)
        xgmi = "xgmi" not in gpu.unsupported
        return {
            "average_gfx_activity": gpu.gfx_activity,
            "average_umc_activity": gpu.umc_activity,
            "current_socket_power": gpu.socket_power_w,
            "xgmi_read_data_acc": xgmi_kb(gpu, gpu.xgmi_read_kb) if xgmi else ["N/A"] * 8,
            "xgmi_write_data_acc": xgmi_kb(gpu, gpu.xgmi_write_kb) if xgmi else ["N/A"] * 8,
        }

    if _at_least(version, "6.4"):

        @api
        def amdsmi_get_link_metrics(h: _Handle) -> dict[str, Any]:
            gpu = check(h, "xgmi")
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


# A symbol each version's wrapper binds at import that older libraries lack (amdsmi_wrapper.py binds
# every function with ctypes when imported, so a newer wrapper fails there, with AttributeError).
FIRST_SYMBOL_OF = {"6.3": "amdsmi_get_gpu_kfd_info", "6.4": "amdsmi_get_gpu_enumeration_info"}


class FakeAmdSmiInstall(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`import amdsmi` on a node whose pip-installed wrapper is version `wrapper` and whose ROCm
    library is `rocm`: a newer wrapper fails at import as the real one does. Put it first on
    sys.meta_path (and drop any cached sys.modules["amdsmi"])."""

    def __init__(self, gpus: Sequence[FakeAmdGpu], wrapper: str = LATEST, rocm: str = LATEST) -> None:
        self.gpus, self.wrapper, self.rocm = gpus, wrapper, rocm

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> Any:
        return importlib.machinery.ModuleSpec(fullname, self) if fullname == "amdsmi" else None

    def create_module(self, spec: Any) -> types.ModuleType:
        return make_fake_amdsmi(self.gpus, version=self.wrapper)

    def exec_module(self, module: types.ModuleType) -> None:
        if _parse(self.wrapper) > _parse(self.rocm):
            newer = [s for v, s in FIRST_SYMBOL_OF.items() if _parse(self.rocm) < _parse(v) <= _parse(self.wrapper)]
            symbol = newer[0] if newer else f"<a function added after ROCm {self.rocm}>"
            raise AttributeError(f"/opt/rocm-{self.rocm}.0/lib/libamd_smi.so: undefined symbol: {symbol}")


def mi300x_node(gpus: int = 8, partitions: int = 1) -> list[FakeAmdGpu]:
    """One handle per GPU, or with `partitions` > 1 (CPX: 8, DPX: 2) one per partition, listed
    partition by partition (every GPU's partition 0, then every GPU's partition 1, ...)."""
    return [
        FakeAmdGpu(
            uuid=f"{i:02x}ff74a1-0000-1000-80fe-bd3a0a6ee0c4", bdf=f"0000:{0x05 + 0x10 * i:02x}:00.0", partition_id=p
        )
        for p in range(partitions)
        for i in range(gpus)
    ]
