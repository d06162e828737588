"""Whether a command can listen where it is told to, checked before it starts anything: a busy port is
then one line naming it, not a failure halfway through start-up (a database started for nothing, a
server retrying, a traceback)."""

from __future__ import annotations

import errno
import socket


class PortInUse(OSError):
    """Something already listens on this address."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(f"port {port} on {host} is in use")
        self.host = host
        self.port = port


def ensure_free(host: str, port: int) -> None:
    """Return if a server could listen on host:port now; PortInUse if something listens there, an
    OSError in words for any other reason (an address not on this host, a privileged port)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            # As every server of ours binds: a port whose last connections linger in TIME_WAIT is free.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(host, port) from None
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
