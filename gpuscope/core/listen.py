"""Parsing HOST:PORT listen addresses, shared by every service's command line."""

from __future__ import annotations

import socket


def parse_listen(listen: str) -> tuple[str, int]:
    """'HOST:PORT', ':PORT' (all interfaces) or '[::1]:PORT'."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"listen address must be HOST:PORT (or :PORT for every interface), got {listen!r}")
    if not 0 <= int(port) <= 65535:
        raise ValueError(f"listen address {listen!r}: port {int(port)} is not a TCP port (0-65535)")
    return host.strip("[]") or "0.0.0.0", int(port)  # noqa: S104 - ':PORT' means every interface


def free_loopback_port() -> int:
    """A 127.0.0.1 port nothing listens on right now (for a server started next, or 'connection refused')."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
