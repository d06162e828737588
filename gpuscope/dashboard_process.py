"""The dashboard process: its settings, build() that makes the in-process server of the demo and the
tests, and run() that serves `gpuscope dashboard` with gunicorn. Both make the app the same way."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import psycopg
from flask import Flask
from psycopg_pool import ConnectionPool

from gpuscope.core.dsn import first_line
from gpuscope.core.listen import parse_listen
from gpuscope.core.pools import open_read_pool
from gpuscope.core.settings_flags import check_bounds, flag
from gpuscope.dashboard.app import create_app
from gpuscope.dashboard.auth import UsersFile, read_users
from gpuscope.dashboard.context import MAX_BODY_BYTES, REFRESH_MS, DashboardOptions, read_rack_budgets
from gpuscope.dashboard.server import THREADS_PER_WORKER, DashboardServer, serve_with_gunicorn
from gpuscope.reports.config import load_reports_config

log = logging.getLogger(__name__)

# A web UI with logins off by default: loopback unless the operator says otherwise.
DEFAULT_LISTEN = "127.0.0.1:8050"
PROBE_TIMEOUT_S = 5  # libpq's connect_timeout: whole seconds


@dataclass(frozen=True)
class DashboardSettings:
    """`gpuscope dashboard`'s settings: each field is one option (gpuscope/core/settings_flags.py), and
    GPUSCOPE_DASHBOARD_<FIELD> in the environment."""

    env_prefix: ClassVar[str] = "GPUSCOPE_DASHBOARD_"

    db: str = field(  # the collector's database, or a read replica of it
        metadata=flag("PostgreSQL DSN of the collector's database, a read replica will do")
    )
    listen: str = field(default=DEFAULT_LISTEN, metadata=flag("HOST:PORT"))
    collector_url: str | None = field(  # silences are managed through the collector's API
        default=None,
        metadata=flag("collector base URL: silences are managed through it", name="--collector", metavar="URL"),
    )
    basic_auth_file: Path | None = field(default=None, metadata=flag("require a login: 'user:pbkdf2_sha256$...' lines"))
    rack_budgets_file: Path | None = field(
        default=None, metadata=flag("YAML mapping of rack (or cluster/rack) to a budget in kW", name="--rack-budgets")
    )
    refresh_ms: int = field(default=REFRESH_MS, metadata=flag("how often the pages refresh, in milliseconds", ge=100))
    max_body_bytes: int = field(
        default=MAX_BODY_BYTES, metadata=flag("refuse larger request bodies with 413", default_text="1 MiB", ge=1)
    )
    reports_config: Path | None = field(
        default=None,
        metadata=flag("the Reports page's currency, prices per GPU model and grid intensity (YAML, docs/reports.md)"),
    )
    workers: int = field(  # run() only; build() serves in this process
        default=2, metadata=flag(f"gunicorn worker processes, {THREADS_PER_WORKER} threads each", ge=1)
    )

    def __post_init__(self) -> None:
        check_bounds(self)  # settings made in code too: the demo, the tests


@contextlib.contextmanager
def build(settings: DashboardSettings) -> Iterator[DashboardServer]:
    """The dashboard server (not yet serving) for as long as the context lasts; files are read now."""
    options, users = _read_files(settings)
    host, port = parse_listen(settings.listen)
    pool = _open_pool(settings.db)
    try:
        yield DashboardServer(create_app(pool, options, users), host, port)
    finally:
        pool.close()


def run(settings: DashboardSettings) -> None:
    """Serve with gunicorn until SIGINT or SIGTERM: settings.workers processes, each with its own app
    and read pool. Files are read here first, so a broken one stops the start in one line."""
    options, users = _read_files(settings)
    host, port = parse_listen(settings.listen)
    say_if_unreachable(settings.db)
    pools: list[ConnectionPool[Any]] = []  # this worker's, once forked

    def load_app() -> Flask:
        pools.append(_open_pool(settings.db))
        return create_app(pools[-1], options, users).server

    def close_pools() -> None:
        while pools:
            pools.pop().close()

    def say_where(bound_port: int) -> None:
        login = " (login required)" if settings.basic_auth_file else ""
        print(f"gpuscope dashboard on http://{host}:{bound_port}{login}", flush=True)

    serve_with_gunicorn(load_app, host, port, settings.workers, on_ready=say_where, on_worker_exit=close_pools)


def say_if_unreachable(dsn: str) -> None:
    """Connect once before serving: a database that does not answer is said in one line, with libpq's
    reason. The dashboard serves anyway (a replica may be restarting): its pages say the database is
    away and its pools keep trying, so it recovers by itself, as the collector does."""
    try:
        psycopg.connect(dsn, connect_timeout=PROBE_TIMEOUT_S).close()
    except psycopg.OperationalError as exc:
        log.warning(
            "cannot reach the database (%s): serving anyway; the pages say so, and the dashboard keeps"
            " trying to connect",
            first_line(exc),
        )


def _read_files(settings: DashboardSettings) -> tuple[DashboardOptions, UsersFile | None]:
    options = DashboardOptions(
        collector_url=settings.collector_url,
        rack_budgets_kw=read_rack_budgets(settings.rack_budgets_file) if settings.rack_budgets_file else {},
        refresh_ms=settings.refresh_ms,
        max_body_bytes=settings.max_body_bytes,
    )
    if settings.reports_config is not None:
        options = dataclasses.replace(options, rates=load_reports_config(settings.reports_config).rates)
    users = read_users(settings.basic_auth_file) if settings.basic_auth_file else None
    return options, users


def _open_pool(dsn: str) -> ConnectionPool[Any]:
    # A connection per thread of a gunicorn worker; up even while the database is not.
    return open_read_pool(dsn, max_size=THREADS_PER_WORKER, timeout=3.0, wait=False)
