"""What the fake `pynvml` reports: one FakeGpu per GPU, FakeMigDevice per MIG device, in NVML's units
(power mW, energy mJ, memory bytes, clocks MHz, violation time ns, PCIe throughput KB/s, NVLink KiB)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pynvml as real

GIB = 2**30
MIB = 2**20

UNSUPPORTABLE = {
    "memory_temp",
    "gpm",
    "nvlink",
    "nvlink_aggregate",  # scopeId UINT_MAX sums of the NVLink throughput fields (older drivers lack them)
    "ecc",
    "remapped_rows",
    "energy",
    "pcie_throughput",
    "pcie_counters",  # NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES, from driver 555
    "memory_v2",  # nvmlDeviceGetMemoryInfo_v2, from driver 510: older ones lack the symbol
    "violation",
    "events",
    "video",  # encoder/decoder utilisation: data-centre boards without NVENC/NVDEC (A100 has no NVENC)
    "serial",  # GeForce boards have no serial number NVML will give
    "vgpu",  # virtualization mode and vGPU licensing
    "mig",
    "recovery_action",  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: a driver older than the field
}


@dataclass(eq=False)
class FakeMigDevice:
    """One MIG device: a compute instance inside a GPU instance; its memory is the GPU instance's."""

    uuid: str
    gpu_instance_id: int
    compute_instance_id: int = 0
    profile: str = "1g.10gb"
    gpu_slices: int = 1
    compute_slices: int = 1
    memory_mib: int = 10_035  # nvmlDeviceGetAttributes: a little under the profile's name
    fb_used: int = 3 * GIB
    fb_reserved: int = 38 * MIB
    processes: list[int] = field(default_factory=list)
    gpm_sm_util: float = 40.0
    gpm_tensor_util: float = 21.0
    gpm_graphics_util: float = 44.0
    gpm_dram_bw_util: float = 18.0


@dataclass(eq=False)  # compared by identity: two GPUs are never the same GPU
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
    fb_used: int = 61 * GIB  # allocated; nvmlDeviceGetMemoryInfo v1 adds fb_reserved to it
    fb_reserved: int = 512 * MIB  # set aside by the driver and firmware
    clocks_event_reasons: int = 0
    power_violation_ns: int = 0
    thermal_violation_ns: int = 0
    pcie_replay: int = 0
    pcie_tx_kbs: int = 1_200_000
    pcie_rx_kbs: int = 900_000
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)  # correctable, uncorrectable, pending, failure
    recovery_action: int = 0  # what the driver says must be done: NVML_GPU_RECOVERY_ACTION_* (0 none)
    nvlinks: int = 18
    nvlink_tx_kib: int = 10_000_000
    nvlink_rx_kib: int = 9_000_000
    nvlink_errors: dict[int, int] = field(default_factory=dict)  # NVML_NVLINK_ERROR_DL_* -> count per link
    # Hopper answers NOT_SUPPORTED for the CRC-data counter on every link (DCGM issue #173).
    nvlink_counters_unsupported: set[int] = field(default_factory=lambda: {real.NVML_NVLINK_ERROR_DL_CRC_DATA})
    failing_links: set[int] = field(default_factory=set)  # links whose reads fail now (NVML_ERROR_UNKNOWN)
    gpm_sm_util: float = 83.0
    gpm_tensor_util: float = 57.0
    gpm_graphics_util: float = 96.0  # any kernel running: close to nvmlDeviceGetUtilizationRates' gpu
    gpm_dram_bw_util: float = 38.0
    enc_util: int = 0  # percent; training uses no NVENC
    dec_util: int = 3  # a data loader decoding video on NVDEC
    serial: str = "1654922006535"
    virtualization_mode: int = 0  # NVML_GPU_VIRTUALIZATION_MODE_NONE: bare metal
    vgpu_license_state: int = 0  # nvmlGridLicenseState of the vGPU feature, in a vGPU guest
    processes: list[int] = field(default_factory=list)  # PIDs running on this GPU (outside MIG devices)
    # What this GPU lacks: names from UNSUPPORTABLE. Each raises NVMLError_NotSupported.
    unsupported: set[str] = field(default_factory=set)
    lost: bool = False  # fell off the bus: every call raises NVMLError_GpuIsLost
    no_permission: bool = False  # nvmlDeviceGetHandleByIndex answers NO_PERMISSION (e.g. cgroup-denied)
    mig_enabled: bool = False
    mig_devices: list[FakeMigDevice] = field(default_factory=list)
    # Root or CAP_SYS_ADMIN: with MIG on, the GPU-wide memory and process list need it.
    privileged: bool = True


def h100_node(gpus: int = 8) -> list[FakeGpu]:
    """A healthy 8-GPU Hopper node."""
    return [
        FakeGpu(uuid=f"GPU-00000000-0000-4000-8000-{i:012d}", bus_id=f"00000000:{0x18 + 0x11 * i:02X}:00.0")
        for i in range(gpus)
    ]


def mig_layout(gpu: FakeGpu, profiles: list[str]) -> FakeGpu:
    """`gpu` in MIG mode with one GPU instance (and one compute instance) per profile, e.g. ["3g.40gb",
    "1g.10gb"]; GPU instance ids as an H100 numbers them (from 1 upwards, in creation order)."""
    gpu.mig_enabled = True
    gpu.mig_devices = []
    for i, profile in enumerate(profiles):
        slices, gigabytes = (int(part) for part in profile.removesuffix("gb").split("g."))
        gpu.mig_devices.append(
            FakeMigDevice(
                uuid=f"MIG-{gpu.uuid.removeprefix('GPU-')[:-4]}{i:04d}",
                gpu_instance_id=i + 1,
                profile=profile,
                gpu_slices=slices,
                compute_slices=slices,
                memory_mib=round(gigabytes * 1024 * 0.98),  # a little under the name, as NVML reports it
            )
        )
    return gpu
