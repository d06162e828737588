"""Writes an InfiniBand sysfs tree (the kernel's layout and value formats) for benchmarks."""

from __future__ import annotations

from pathlib import Path

ACTIVE_NDR_PORT = {
    "state": "4: ACTIVE",
    "phys_state": "5: LinkUp",
    "rate": "400 Gb/sec (4X NDR)",
    "link_layer": "InfiniBand",
}
COUNTER_VALUES = {
    "port_xmit_data": 2_812_345_678_901,  # 4-byte words
    "port_rcv_data": 2_798_765_432_109,
    "port_xmit_packets": 2_745_000_000,
    "port_rcv_packets": 2_733_000_000,
    "port_xmit_wait": 1_234_567,
    "symbol_error": 0,
    "link_downed": 0,
    "port_rcv_errors": 0,
    "link_error_recovery": 0,
    "port_xmit_discards": 0,
    "excessive_buffer_overrun_errors": 0,
}


def write_infiniband_tree(root: Path, devices: int = 8) -> Path:
    """`root`/<mlx5_N>/ports/1/... for N in range(devices); returns the class directory."""
    for n in range(devices):
        port = root / f"mlx5_{n}" / "ports" / "1"
        (port / "counters").mkdir(parents=True, exist_ok=True)
        for name, value in ACTIVE_NDR_PORT.items():
            (port / name).write_text(value + "\n")
        for name, count in COUNTER_VALUES.items():
            (port / "counters" / name).write_text(f"{count + n}\n")
    return root
