"""The dashboard process: its settings, build() that opens the read pool and makes the server, run()."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gpuscope.core.listen import parse_listen
from gpuscope.core.pools import open_read_pool
from gpuscope.dashboard.app import create_app
from gpuscope.dashboard.auth import read_users
from gpuscope.dashboard.context import DashboardOptions, read_rack_budgets
from gpuscope.dashboard.server import DashboardServer

# A web UI with logins off by default: loopback unless the operator says otherwise.
DEFAULT_LISTEN = "127.0.0.1:8050"


@dataclass(frozen=True)
class DashboardSettings:
    db: str  # the collector's database, or a read replica of it
    listen: str = DEFAULT_LISTEN
    collector_url: str | None = None  # silences are managed through the collector's API
    basic_auth_file: Path | None = None  # 'user:pbkdf2_sha256$...' lines: require a login
    rack_budgets_file: Path | None = None  # YAML: rack (or cluster/rack) -> budget in kW
    refresh_ms: int | None = None  # None: the dashboard's default
    max_body_bytes: int | None = None  # None: the dashboard's default (1 MiB)


@contextlib.contextmanager
def build(settings: DashboardSettings) -> Iterator[DashboardServer]:
    """The dashboard server (not yet serving) for as long as the context lasts; files are read now."""
    options = DashboardOptions(
        collector_url=settings.collector_url,
        rack_budgets_kw=read_rack_budgets(settings.rack_budgets_file) if settings.rack_budgets_file else {},
    )
    if settings.refresh_ms is not None:
        options = dataclasses.replace(options, refresh_ms=settings.refresh_ms)
    if settings.max_body_bytes is not None:
        options = dataclasses.replace(options, max_body_bytes=settings.max_body_bytes)
    users = read_users(settings.basic_auth_file) if settings.basic_auth_file else None
    host, port = parse_listen(settings.listen)
    pool = open_read_pool(settings.db, max_size=4, timeout=3.0, wait=False)  # up even while the database is not
    try:
        yield DashboardServer(create_app(pool, options, users), host, port)
    finally:
        pool.close()


def run(settings: DashboardSettings) -> None:
    with build(settings) as server:
        host, _ = parse_listen(settings.listen)
        login = " (login required)" if settings.basic_auth_file else ""
        print(f"gpuscope dashboard on http://{host}:{server.port}{login}", flush=True)
        server.serve_forever()
