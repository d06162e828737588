"""A dashboard on loopback for tests about requests rather than data (request bodies, logins)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from gpuscope.core.listen import free_loopback_port
from gpuscope.core.pools import open_read_pool
from gpuscope.dashboard.app import create_app
from gpuscope.dashboard.context import DashboardOptions
from gpuscope.dashboard.server import DashboardServer


@contextlib.contextmanager
def serving(options: DashboardOptions | None = None, users: dict[str, str] | None = None) -> Iterator[str]:
    """The dashboard's base URL, served as `gpuscope dashboard` serves it. Its database is a port where
    nothing listens: these requests never reach it, and no database has to be made for them."""
    dsn = f"postgresql://nobody:x@127.0.0.1:{free_loopback_port()}/none"
    pool = open_read_pool(dsn, max_size=1, timeout=1.0, wait=False)
    server = DashboardServer(create_app(pool, options, users), "127.0.0.1", 0)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()
        pool.close()
