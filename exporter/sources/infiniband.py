"""InfiniBand (and RoCE) port counters from sysfs: /sys/class/infiniband/<dev>/ports/<n>/.

The root is a parameter so tests read a checked-in tree. File names and units follow the kernel ABI
(Documentation/ABI/stable/sysfs-class-infiniband): port_xmit_data and port_rcv_data count 4-byte
words, so they are multiplied by 4. A missing or unreadable file leaves that value out.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from gpuscope.exporter.snapshot import PortIdentity, PortReading
from gpuscope.exporter.sources.base import BackendUnavailable
from gpuscope.exporter.sources.errors import LogOnce

log = logging.getLogger(__name__)

DEFAULT_ROOT = Path("/sys/class/infiniband")

# counters/<file> -> (catalog key, multiplier)
COUNTERS = {
    "port_xmit_data": ("xmit_bytes", 4),
    "port_rcv_data": ("rcv_bytes", 4),
    "port_xmit_packets": ("xmit_packets", 1),
    "port_rcv_packets": ("rcv_packets", 1),
    "port_xmit_wait": ("xmit_wait", 1),
    "symbol_error": ("symbol_errors", 1),
    "link_downed": ("link_downed", 1),
    "port_rcv_errors": ("rcv_errors", 1),
    "link_error_recovery": ("link_error_recovery", 1),
    "port_xmit_discards": ("xmit_discards", 1),
}


@dataclass(frozen=True)
class _Port:
    identity: PortIdentity
    directory: str
    counter_files: tuple[tuple[str, str, int], ...]  # (path, key, multiplier) for the files present


class InfinibandSource:
    name = "infiniband"

    def __init__(self, root: Path = DEFAULT_ROOT) -> None:
        if not root.is_dir():
            raise BackendUnavailable(f"no InfiniBand devices: {root} does not exist")
        self._log_once = LogOnce(log)
        self._fds: dict[str, int] = {}
        self._ports = tuple(self._discover(root))

    @property
    def ports(self) -> tuple[PortIdentity, ...]:
        return tuple(port.identity for port in self._ports)

    def read(self, now: float) -> tuple[tuple[()], tuple[PortReading, ...]]:
        return (), self.read_ports()

    def read_ports(self) -> tuple[PortReading, ...]:
        return tuple(self._read_port(port) for port in self._ports)

    def close(self) -> None:
        for path in list(self._fds):
            self._forget(path)

    def _discover(self, root: Path) -> list[_Port]:
        ports = []
        for device in sorted(root.iterdir()):
            ports_dir = device / "ports"
            if not ports_dir.is_dir():
                continue
            for port_dir in sorted(ports_dir.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 0):
                if not port_dir.name.isdigit():
                    continue
                counters = port_dir / "counters"
                present = tuple(
                    (str(counters / name), key, multiplier)
                    for name, (key, multiplier) in COUNTERS.items()
                    if (counters / name).is_file()
                )
                ports.append(_Port(PortIdentity(device.name, int(port_dir.name)), str(port_dir), present))
        log.info("InfiniBand: %d ports under %s", len(ports), root)
        return ports

    def _read_port(self, port: _Port) -> PortReading:
        values: dict[str, float] = {}
        for path, key, multiplier in port.counter_files:
            raw = self._read(path)
            if raw is not None and raw.isdigit():
                values[key] = float(int(raw) * multiplier)
        for name, key in (("state", "state"), ("phys_state", "phys_state")):
            raw = self._read(f"{port.directory}/{name}")  # "4: ACTIVE", "5: LinkUp"
            code = raw.split(b":", 1)[0] if raw is not None else b""
            if code.isdigit():
                values[key] = float(code)
        rate = self._read(f"{port.directory}/rate")  # "400 Gb/sec (4X NDR)"
        if rate is not None:
            try:
                values["rate_gbps"] = float(rate.split()[0])
            except (ValueError, IndexError):
                shown, where = rate.decode("ascii", "replace"), port.directory
                self._log_once(("rate", where), logging.WARNING, "unreadable rate %r in %s", shown, where)
        return PortReading(port=port.identity, values=values)

    def _read(self, path: str) -> bytes | None:
        """The file's current text, as ASCII bytes without surrounding white space (parsed as they are:
        int() and float() take bytes). Files stay open: a sysfs attribute read again from offset 0 is
        generated afresh, so one pread per value replaces open, read and close."""
        try:
            fd = self._fds.get(path)
            if fd is None:
                fd = self._fds[path] = os.open(path, os.O_RDONLY)
            return os.pread(fd, 128, 0).strip()
        except OSError as exc:
            self._forget(path)
            self._log_once(path, logging.WARNING, "cannot read %s: %s", path, exc.strerror)
            return None

    def _forget(self, path: str) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            os.close(fd)
