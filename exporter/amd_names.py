"""The table of AMD device-metrics-exporter names that gpuscope serves (--amd-compat): one row per family
(gpu_clock: one per clock_type), from a catalog key in its native unit, scaled to AMD's unit.

AMD's names, units and help texts: github.com/ROCm/device-metrics-exporter,
pkg/amdgpu/gpuagent/gpuagent_gpu_metrics.go and docs/configuration/metricslist.md (commit afd0fe81).
What AMD's exporter has and gpuscope does not: the docstring of exporter/amd_compat.py.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

MIB = 2**20  # AMD's "MB" of VRAM are MiB, as amd-smi's are
KIB = 1024  # AMD's "KB" of XGMI data: amdsmi's counter unit, which the AMD backend multiplies by 1024


class AmdName(NamedTuple):
    name: str  # AMD's family name; a counter's without the _total suffix its samples carry
    type: Literal["gauge", "counter"]
    key: str  # catalog key (exporter/catalog.csv)
    scale: float  # native value * scale = AMD's value
    help: str
    labels: tuple[tuple[str, str], ...] = ()  # fixed labels this row adds


# Per GPU (scope "gpu" catalog keys). AMD's exporter writes every family as a gauge; the ECC totals
# are counters here (their sample names, gpu_ecc_*_total, are AMD's), which they are.
GPU_NAMES = (
    AmdName("gpu_gfx_activity", "gauge", "util_pct", 1, "Graphics engine activity in percent (0-100)"),
    AmdName("gpu_umc_activity", "gauge", "mem_copy_util_pct", 1, "Memory controller (UMC) activity in percent (0-100)"),
    AmdName("gpu_power_usage", "gauge", "power_w", 1, "Socket power in watts"),
    AmdName("gpu_package_power", "gauge", "power_w", 1, "Socket power in watts (the same reading as gpu_power_usage)"),
    AmdName("gpu_energy_consumed", "gauge", "energy_j", 1e6, "Energy consumed since the driver was loaded, in uJ"),
    AmdName("gpu_junction_temperature", "gauge", "temp_c", 1, "Junction (hotspot) temperature in degrees Celsius"),
    AmdName("gpu_memory_temperature", "gauge", "mem_temp_c", 1, "VRAM temperature in degrees Celsius"),
    AmdName("gpu_clock", "gauge", "sm_clock_mhz", 1, "Clock in MHz, by clock_type", (("clock_type", "system"),)),
    AmdName("gpu_clock", "gauge", "mem_clock_mhz", 1, "Clock in MHz, by clock_type", (("clock_type", "memory"),)),
    AmdName("gpu_total_vram", "gauge", "fb_total_bytes", 1 / MIB, "VRAM size in MB (MiB)"),
    AmdName("gpu_used_vram", "gauge", "fb_used_bytes", 1 / MIB, "VRAM in use in MB (MiB)"),
    AmdName("gpu_ecc_correct", "counter", "ecc_corrected", 1, "Correctable ECC errors, all blocks"),
    AmdName("gpu_ecc_uncorrect", "counter", "ecc_uncorrected", 1, "Uncorrectable ECC errors, all blocks"),
    AmdName("pcie_replay_count", "gauge", "pcie_replay", 1, "PCIe replays since the driver was loaded"),
)

# Per XGMI link (scope "nvlink" catalog keys, which the AMD backend fills from XGMI), labelled link_index.
LINK_NAMES = (
    AmdName("gpu_xgmi_link_rx", "gauge", "link_rx_bytes", 1 / KIB, "XGMI data read on this link, in KB (KiB)"),
    AmdName("gpu_xgmi_link_tx", "gauge", "link_tx_bytes", 1 / KIB, "XGMI data written on this link, in KB (KiB)"),
)
