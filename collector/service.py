"""Runs the collector: the database (external via --db, or embedded), migrations, and uvicorn."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator

import uvicorn
from starlette.types import ASGIApp

from alerts.config import load_notify_config
from alerts.engine import AlertEngine
from alerts.rules import default_rules_text, load_rule_files, parse_rules
from collector.auth import TokenAuth, read_node_tokens, token_or_generate
from collector.embedded_pg import EmbeddedPostgres
from collector.main import create_app
from collector.settings import CollectorSettings
from collector.workers import reuse_port_socket, run_workers
from gpuscope.listen import parse_listen
from gpuscope.tokens import read_token_file

log = logging.getLogger(__name__)


@contextlib.contextmanager
def database(settings: CollectorSettings) -> Iterator[str]:
    """A DSN: the one configured, or an embedded server's for as long as the context lasts."""
    if settings.db is not None:
        yield settings.db.get_secret_value()
        return
    with EmbeddedPostgres(settings.data_dir) as pg:
        yield pg.dsn


def run(settings: CollectorSettings) -> int:
    token = token_or_generate(settings.token_file, settings.data_dir)
    host, port = parse_listen(settings.listen)
    with database(settings) as dsn:
        if settings.workers == 1:
            serve(settings, dsn, token, host, port)
            return 0
        # Bound once here so that a busy port fails now, in one clear line, not in N workers.
        reuse_port_socket(host, port).close()
        log.info("collector listening on %s:%d with %d worker processes", host, port, settings.workers)
        return run_workers(settings.workers, _worker, (settings, dsn, token, host, port))


def alert_engine(settings: CollectorSettings) -> AlertEngine | None:
    """The alert engine the settings ask for; files are read now, so a broken one stops the start."""
    if not settings.alerts:
        return None
    groups = load_rule_files(settings.alert_rules) if settings.alert_rules else parse_rules(default_rules_text())
    config = load_notify_config(settings.notify_config) if settings.notify_config else None
    if config is None:
        log.info("no --notify-config: alerts are evaluated and kept, but not sent anywhere")
    return AlertEngine(groups, config)


def serve(settings: CollectorSettings, dsn: str, token: str, host: str, port: int, workers: bool = False) -> None:
    node_tokens = read_node_tokens(settings.node_tokens_file) if settings.node_tokens_file else None
    read_auth = TokenAuth([read_token_file(settings.read_token_file)]) if settings.read_token_file else None
    admin_auth = TokenAuth([read_token_file(settings.admin_token_file)]) if settings.admin_token_file else None
    app = create_app(
        dsn,
        TokenAuth([token], node_tokens),
        settings.max_body_bytes,
        settings.max_concurrent_writes,
        read_auth,
        settings.retention(),
        settings.timescaledb,
        alert_engine=alert_engine(settings),
        admin_auth=admin_auth,
    )
    config = uvicorn.Config(app, host=host, port=port, log_level="info", access_log=False)
    if not workers:
        log.info("collector listening on %s:%d", host, port)
        uvicorn.Server(config).run()
        return
    uvicorn.Server(config).run(sockets=[reuse_port_socket(host, port)])


def _worker(settings: CollectorSettings, dsn: str, token: str, host: str, port: int) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s")
    serve(settings, dsn, token, host, port, workers=True)


class BackgroundServer:
    """Uvicorn in a thread, for the demo and tests: start() returns once it accepts connections."""

    def __init__(self, app: ASGIApp, host: str, port: int) -> None:
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="uvicorn", daemon=True)

    @property
    def port(self) -> int:
        sockets = self._server.servers[0].sockets
        return int(sockets[0].getsockname()[1])

    def start(self, timeout: float = 60.0) -> None:
        self._thread.start()  # uvicorn installs no signal handlers outside the main thread
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("collector failed to start (see the log above)")
            if time.monotonic() > deadline:
                raise RuntimeError(f"collector did not start within {timeout:.0f}s")
            time.sleep(0.05)

    def stop(self, timeout: float = 15.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)
