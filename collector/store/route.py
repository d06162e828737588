"""Which hosts of the DSN the collector's connections may go to.

Normally all of them, and libpq picks (target_session_attrs=read-write finds the primary). One case libpq
cannot see: a primary whose Patroni died goes on as a primary after its synchronous standby was promoted
elsewhere, and every commit there waits for a standby that has left, while the new primary takes writes.
Both say they are not in recovery, so libpq may keep choosing the old one (the first listed, say). The
database watch sees the commits stuck there (store/watch.py) and fences that host: every connection made
afterwards (the pools', the leader tasks', the watch's) goes through the DSN without it, until the watch
sees it demoted (in recovery) or gone. This is no failover of our own: which server is primary is still
Patroni's decision; the collector only stops writing where commits cannot finish.
"""

from __future__ import annotations

import logging

from psycopg.conninfo import conninfo_to_dict, make_conninfo

log = logging.getLogger(__name__)

DEFAULT_PORT = "5432"


class Route:
    def __init__(self, dsn: str) -> None:
        self.full = dsn
        self.hosts = _hosts(dsn)
        self.fenced: set[tuple[str, str]] = set()

    def dsn(self) -> str:
        """The DSN to connect through now (a pool's conninfo callable)."""
        if not self.fenced:
            return self.full
        kept = [address for address in self.hosts if address not in self.fenced]
        return make_conninfo(self.full, host=",".join(h for h, _ in kept), port=",".join(p for _, p in kept))

    def others(self, host: str, port: str) -> list[tuple[str, str]]:
        """The DSN's hosts but this one and the fenced: where another primary may be. None where the DSN
        names hosts that cannot be told apart (hostaddr, a socket directory): nothing is fenced there."""
        if (host, port) not in self.hosts:
            return []
        return [address for address in self.hosts if address != (host, port) and address not in self.fenced]

    def fence(self, host: str, port: str) -> None:
        self.fenced.add((host, port))

    def unfence(self, host: str, port: str) -> None:
        self.fenced.discard((host, port))


def one_host(dsn: str, host: str, port: str) -> str:
    """`dsn` naming only this host, whatever it is (no target_session_attrs): to ask it directly."""
    params = {k: v for k, v in conninfo_to_dict(dsn).items() if k not in ("target_session_attrs", "hostaddr")}
    return make_conninfo("", **{**params, "host": host, "port": port})


def _hosts(dsn: str) -> list[tuple[str, str]]:
    """The DSN's (host, port) pairs; none where it cannot be told apart by host (hostaddr, a socket
    directory), so nothing is ever fenced there."""
    params = conninfo_to_dict(dsn)
    if params.get("hostaddr"):
        return []
    hosts = str(params.get("host") or "").split(",")
    ports = str(params.get("port") or DEFAULT_PORT).split(",")
    if len(ports) == 1:
        ports = ports * len(hosts)
    if len(ports) != len(hosts) or any(not h or h.startswith("/") for h in hosts):
        return []
    return [(h, p or DEFAULT_PORT) for h, p in zip(hosts, ports, strict=True)]
