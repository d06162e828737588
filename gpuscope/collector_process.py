"""The collector process: its settings (command-line flags over GPUSCOPE_COLLECTOR_* environment
variables), build() that turns them into the app with its parts, and run() that serves it.

The CLI, the demo and the tests all start a collector through build(), so none can drift from production.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import psycopg
from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from gpuscope.alerts import views
from gpuscope.alerts.check import check_sql
from gpuscope.alerts.config import load_notify_config
from gpuscope.alerts.engine import AlertEngine
from gpuscope.alerts.facts import database_facts
from gpuscope.alerts.part import alerts_part
from gpuscope.alerts.rules import Group, default_rules_text, load_rule_files, parse_rules
from gpuscope.collector.api.auth import TokenAuth, read_node_tokens, token_or_generate
from gpuscope.collector.api.fast_ingest import FastIngest
from gpuscope.collector.main import CollectorConfig, create_app
from gpuscope.collector.parts import Part
from gpuscope.collector.service import serve
from gpuscope.collector.store import timescale
from gpuscope.collector.store.availability import DatabaseStatus
from gpuscope.collector.store.migrate import migrate
from gpuscope.collector.store.retention import Retention
from gpuscope.collector.store.timescale import Mode
from gpuscope.collector.workers import reuse_port_socket, run_workers
from gpuscope.core.dsn import check_dsn, first_line
from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.core.listen import parse_listen
from gpuscope.core.logredact import configure_logging
from gpuscope.core.pg_supervisor import Supervisor
from gpuscope.core.shutdown import ShutdownDeadline
from gpuscope.core.tokens import dsn_with_password_file, read_token_file
from gpuscope.dashboard.context import read_rack_budgets  # one file format for both
from gpuscope.health.part import health_part
from gpuscope.health.policy import load_policy
from gpuscope.reports.config import load_reports_config
from gpuscope.reports.part import reports_part
from gpuscope.stragglers.part import stragglers_part

log = logging.getLogger(__name__)

# Exporters on every node push here, so the production default listens on all interfaces.
DEFAULT_LISTEN = "0.0.0.0:9410"


def default_data_dir() -> Path:
    """Where the embedded database and generated secrets live.

    Root (a system service): /var/lib/gpuscope, which the unprivileged PostgreSQL account can reach.
    Anyone else: $XDG_DATA_HOME/gpuscope, i.e. ~/.local/share/gpuscope.
    """
    if os.geteuid() == 0:
        return Path("/var/lib/gpuscope")
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "gpuscope"


class CollectorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUSCOPE_COLLECTOR_")

    listen: str = DEFAULT_LISTEN
    db: SecretStr | None = None  # a DSN carries a password: never printed
    db_password_file: Path | None = None  # the password for `db`, kept out of the command line
    data_dir: Path = default_data_dir()
    token_file: Path | None = None
    node_tokens_file: Path | None = None  # 'CLUSTER/NODE TOKEN' per line: valid for that node of that cluster
    read_token_file: Path | None = None  # when set, the read API requires this bearer token
    # Each read statement is cancelled past this, and one read request's statements share it: 503.
    read_statement_timeout_s: float = Field(default=10.0, gt=0, le=3600)
    max_body_bytes: int = 32 * 2**20
    max_concurrent_writes: int = 8
    workers: int = Field(default=1, ge=1, le=256)  # processes sharing the port (SO_REUSEPORT): one core each
    retention_days: float = Field(default=30.0, gt=0)  # raw samples older than this are dropped, day by day
    minute_rollup_days: float = Field(default=90.0, gt=0)  # at least retention_days
    timescaledb: Mode = "auto"  # use TimescaleDB when the server has it ("on": require it; "off": never)
    hour_rollup_days: float = Field(default=730.0, gt=0)  # hour rollups and events; at least minute_rollup_days
    alerts: bool = True  # evaluate alert rules (in one replica at a time)
    alert_rules: list[Path] = []  # rule files; none: the shipped defaults (alerts/default_rules.yaml)
    notify_config: Path | None = None  # receivers and routes; none: alerts are kept but not sent
    admin_token_file: Path | None = None  # bearer token for creating and expiring silences
    rack_budgets: Path | None = None  # the dashboard's --rack-budgets file, for the rack power alert
    alert_tick_s: float = Field(default=0.5, gt=0)  # how often the engine checks group timers and due groups
    stragglers: bool = True  # run the straggler watch (in one replica at a time)
    # How often the watch reads what settled: part of the onset-to-API latency, cheap (it reads only new buckets).
    straggler_interval_s: float = Field(default=5.0, gt=0, le=300)
    health: bool = True  # run the health loop (in one replica at a time); its API is served either way
    health_policy: Path | None = None  # YAML (docs/health.md); none: dry run with no scheduler
    reports_config: Path | None = None  # YAML (docs/reports.md): prices, grid intensity, digests

    @model_validator(mode="after")
    def _tiers_outlive_finer_ones(self) -> CollectorSettings:
        self.retention()  # raises ValueError naming the rule, which pydantic reports
        return self

    def retention(self) -> Retention:
        return Retention(
            raw=timedelta(days=self.retention_days),
            minute_rollups=timedelta(days=self.minute_rollup_days),
            hour_rollups=timedelta(days=self.hour_rollup_days),
        )


def build(settings: CollectorSettings, dsn: str, token: str, database: DatabaseStatus | None = None) -> FastIngest:
    """The collector app for these settings on database `dsn`, accepting ingest `token` (and the node
    tokens of settings.node_tokens_file). Files are read now, so a broken one stops the start.
    `database`: how the app learns the database's state (an embedded server's supervisor tells it more)."""
    database = database or DatabaseStatus()
    node_tokens = read_node_tokens(settings.node_tokens_file) if settings.node_tokens_file else None
    config = CollectorConfig(
        dsn=dsn,
        auth=TokenAuth([token], node_tokens),
        read_auth=_auth(settings.read_token_file),
        admin_auth=_auth(settings.admin_token_file),
        max_body_bytes=settings.max_body_bytes,
        read_statement_timeout_s=settings.read_statement_timeout_s,
        max_concurrent_writes=settings.max_concurrent_writes,
        retention=settings.retention(),
        timescaledb=settings.timescaledb,
        parts=parts(settings, database),
        database=database,
    )
    return create_app(config)


def parts(settings: CollectorSettings, database: DatabaseStatus | None = None) -> tuple[Part, ...]:
    """The extensions this collector runs: the straggler watch, the alerts, fleet health (APIs always,
    their loops if asked) and the reports."""
    found = [stragglers_part(settings.straggler_interval_s)] if settings.stragglers else []
    policy = load_policy(settings.health_policy) if settings.health_policy else None
    reports = load_reports_config(settings.reports_config) if settings.reports_config else None
    # The digest's files (url_file, password_file) are read beside the configuration that names them.
    base = settings.reports_config.parent if settings.reports_config else Path()
    return (
        *found,
        alerts_part(alert_engine(settings, database)),
        health_part(policy, run_loop=settings.health),
        reports_part(reports, base=base),
    )


def alert_engine(settings: CollectorSettings, database: DatabaseStatus | None = None) -> AlertEngine | None:
    """The alert engine the settings ask for; files are read now, so a broken one stops the start."""
    if not settings.alerts:
        return None
    groups = rule_groups(settings)
    config = load_notify_config(settings.notify_config) if settings.notify_config else None
    if config is None and database is not None:  # said by the engine that runs, not by check_inputs' trial
        log.info("no --notify-config: alerts are evaluated and kept, but not sent anywhere")
    facts = (lambda: database_facts(database)) if database is not None else None
    budgets = read_rack_budgets(settings.rack_budgets) if settings.rack_budgets else {}
    return AlertEngine(groups, config, tick_s=settings.alert_tick_s, facts=facts, rack_budgets_kw=budgets)


def rule_groups(settings: CollectorSettings) -> list[Group]:
    """The alert rules: the files given with --rules, else the shipped ones."""
    return load_rule_files(settings.alert_rules) if settings.alert_rules else parse_rules(default_rules_text())


def run(settings: CollectorSettings) -> int:
    """Serve until stopped: the database (the configured one or an embedded one), then one or N processes.
    Every input is checked first (check_inputs, then the database and the rules' SQL on it), so a wrong
    one stops the start in one line before a token file is written, a port bound or "listening" logged.
    A stop signal is obeyed within 10 s whatever the database is doing (core/shutdown.py)."""
    host, port = parse_listen(settings.listen)
    rules = check_inputs(settings)
    with database(settings) as db:
        deadline = ShutdownDeadline(last_words=db.stop_now)
        try:
            check_database(db.dsn, external=settings.db is not None)
            check_rules(db.dsn, settings, rules)
            token = token_or_generate(settings.token_file, settings.data_dir)
            if settings.workers == 1:
                log.info("collector listening on %s:%d", host, port)
                serve(build(settings, db.dsn, token, db.status), host, port, on_stop_signal=deadline.arm)
                return 0
            # Bound once here so that a busy port fails now, in one clear line, not in N workers.
            reuse_port_socket(host, port).close()
            log.info("collector listening on %s:%d with %d worker processes", host, port, settings.workers)
            args = (settings, db.dsn, token, host, port, db.status.data_dir)
            return run_workers(settings.workers, _worker, args, on_stop_signal=deadline.arm)
        finally:
            deadline.arm()  # stopping the embedded server is bounded too


def check_inputs(settings: CollectorSettings) -> list[Group]:
    """Everything the settings name that can be checked without a database, read and parsed now: the
    DSN's syntax, the password and token files, the node tokens, the rule files, the notification, health
    and reports configurations. Raises in words; returns the alert rules, for check_rules."""
    if settings.db is not None:
        dsn = settings.db.get_secret_value()
        check_dsn(dsn)
        dsn_with_password_file(dsn, settings.db_password_file)  # the file is read, the DSN must hold none
    elif settings.db_password_file is not None:
        raise ValueError("--db-password-file needs --db (a DSN without its password)")
    node_tokens = read_node_tokens(settings.node_tokens_file) if settings.node_tokens_file else None
    if settings.token_file is not None or node_tokens:
        given = [read_token_file(settings.token_file)] if settings.token_file else []
        TokenAuth(given, node_tokens)  # too short, or a token given twice
    _auth(settings.read_token_file)
    _auth(settings.admin_token_file)
    parts(settings)  # the rule files, --notify-config, --health-policy and --reports-config, parsed
    return rule_groups(settings) if settings.alerts else []


def check_rules(dsn: str, settings: CollectorSettings, groups: list[Group]) -> None:
    """Plan every rule's SQL on the database it will run on, so a rule the database refuses stops the start
    naming the rule and the database's reason (the engine would otherwise log its failure at every
    evaluation). The schema is prepared first, as the app's start does (collector/main.py): the store's
    migrations, the storage layout, then the views the rules read; each step is idempotent."""
    if not groups:
        return
    migrate(dsn)
    timescale.setup(dsn, settings.timescaledb)
    views.apply(dsn)
    problems = check_sql(dsn, groups)
    if problems:
        raise ValueError(f"alert rules that cannot run on this database: {'; '.join(problems)}")


@dataclass(frozen=True)
class Database:
    dsn: str
    status: DatabaseStatus
    stop_now: Callable[[], None] = lambda: None  # past the shutdown deadline: what must not outlive us


@contextlib.contextmanager
def database(settings: CollectorSettings) -> Iterator[Database]:
    """The configured database, or an embedded server, supervised (restarted when it dies), for as long
    as the context lasts."""
    if settings.db is not None:
        yield Database(
            dsn_with_password_file(settings.db.get_secret_value(), settings.db_password_file), DatabaseStatus()
        )
        return
    if settings.db_password_file is not None:
        raise ValueError("--db-password-file needs --db (a DSN without its password)")
    server = EmbeddedPostgres(settings.data_dir)
    server.start()
    supervisor = Supervisor(server)
    supervisor.start()
    try:
        yield Database(server.dsn, DatabaseStatus(server.pgdata, supervisor.problem), server.stop_now)
    finally:
        supervisor.stop()  # first: the server's exit below is not a crash to recover from
        server.stop(timeout=EMBEDDED_STOP_S)


def check_database(dsn: str, external: bool = True) -> None:
    """Connect once before serving, so a wrong --db is one line naming the problem (FastAPI's start-up
    would print a traceback of its lifespan machinery instead). An external server that may lose
    committed transactions is warned about: a 200 from ingest would no longer mean stored."""
    try:
        with psycopg.connect(dsn, connect_timeout=10) as conn:
            settings: dict[str, str] = dict(conn.execute(UNSAFE_SETTINGS).fetchall()) if external else {}
    except psycopg.ProgrammingError as exc:  # libpq could not parse it
        raise ValueError(f"--db is not a PostgreSQL connection string: {first_line(exc)}") from None
    except psycopg.OperationalError as exc:
        raise RuntimeError(f"cannot connect to the database given with --db: {first_line(exc)}") from None
    for name, value in sorted(settings.items()):
        if value == "off":
            log.warning(
                "the database runs with %s=off: a crash of its host can lose batches the collector has already"
                " acknowledged (a 200 no longer means stored). Turn it on for production.",
                name,
            )


# The two settings that void "acknowledged means stored" (full_page_writes=off risks torn pages too,
# but those are repaired from a backup, not silently lost).
UNSAFE_SETTINGS = "SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit')"
EMBEDDED_STOP_S = 5.0  # a fast shutdown's checkpoint; past it, immediate shutdown (the WAL has it all)


def _worker(settings: CollectorSettings, dsn: str, token: str, host: str, port: int, data_dir: Path | None) -> None:
    # a fresh process (spawned): the CLI's logging again, libraries quiet and secrets redacted
    configure_logging(logging.INFO, fmt="%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s")
    app = build(settings, dsn, token, DatabaseStatus(data_dir))
    serve(app, host, port, sockets=[reuse_port_socket(host, port)])


def _auth(token_file: Path | None) -> TokenAuth | None:
    return TokenAuth([read_token_file(token_file)]) if token_file else None
