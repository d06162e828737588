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
from typing import Annotated

import psycopg
from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from gpuscope.alerts import views
from gpuscope.alerts.check import check_sql
from gpuscope.alerts.config import load_notify_config
from gpuscope.alerts.engine import TICK_S, AlertEngine
from gpuscope.alerts.facts import database_facts
from gpuscope.alerts.part import alerts_part
from gpuscope.alerts.rules import Group, default_rules_text, load_rule_files, parse_rules
from gpuscope.collector.api.auth import TokenAuth, read_node_tokens, token_or_generate
from gpuscope.collector.api.fast_ingest import FastIngest
from gpuscope.collector.main import CollectorConfig, create_app
from gpuscope.collector.parts import Part
from gpuscope.collector.service import serve
from gpuscope.collector.store import timescale
from gpuscope.collector.store.availability import DatabaseStatus, no_primary
from gpuscope.collector.store.migrate import migrate
from gpuscope.collector.store.retention import DEFAULT_RETENTION, Retention
from gpuscope.collector.store.timescale import Mode
from gpuscope.collector.workers import reuse_port_socket, run_workers
from gpuscope.core.dsn import check_dsn, first_line
from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.core.listen import parse_listen
from gpuscope.core.logredact import configure_logging
from gpuscope.core.pg_supervisor import Supervisor
from gpuscope.core.settings_flags import Flag
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
    """`gpuscope collector`'s settings: each field is one option, its help the description
    (gpuscope/core/settings_flags.py), and GPUSCOPE_COLLECTOR_<FIELD> in the environment."""

    model_config = SettingsConfigDict(env_prefix="GPUSCOPE_COLLECTOR_")

    listen: str = Field(default=DEFAULT_LISTEN, description="HOST:PORT")
    db: SecretStr | None = Field(  # a DSN carries a password: never printed
        default=None, description="PostgreSQL DSN (default: an embedded server in --data-dir)"
    )
    db_password_file: Path | None = Field(
        default=None, description="the database password, kept out of the DSN and the command line"
    )
    read_db: SecretStr | None = Field(  # the same hosts with target_session_attrs=prefer-standby, say
        default=None,
        description="PostgreSQL DSN for the read API (default: --db); --db-password-file applies to it too",
    )
    data_dir: Path = Field(
        default=default_data_dir(),
        description="the embedded database (without --db) and generated token live here"
        " (default: /var/lib/gpuscope as root, else ~/.local/share/gpuscope)",
    )
    token_file: Path | None = Field(default=None, description="ingest bearer token (default: generated in --data-dir)")
    node_tokens_file: Path | None = Field(  # valid for that node of that cluster only
        default=None, description="per-node ingest tokens, 'CLUSTER/NODE TOKEN' per line"
    )
    read_token_file: Path | None = Field(default=None, description="require this bearer token on the read API")
    # Each read statement is cancelled past this, and one read request's statements share it: 503.
    read_statement_timeout_s: float = Field(
        default=10.0,  # as CollectorConfig's, where None means no limit
        gt=0,
        le=3600,
        description="cancel the read API's statements past this many seconds (one request's share it): 503",
    )
    max_body_bytes: Annotated[int, Flag(default_text="32 MiB")] = Field(
        default=CollectorConfig.max_body_bytes, ge=1, description="refuse larger ingest request bodies with 413"
    )
    max_concurrent_writes: int = Field(
        default=CollectorConfig.max_concurrent_writes,
        ge=1,
        description="ingest batches written to the database at once",
    )
    workers: int = Field(  # processes sharing the port (SO_REUSEPORT)
        default=1, ge=1, le=256, description="collector processes sharing the port, one core each"
    )
    retention_days: float = Field(  # raw samples older than this are dropped, day by day
        default=DEFAULT_RETENTION.raw / timedelta(days=1), gt=0, description="keep raw samples this long"
    )
    minute_rollup_days: float = Field(  # at least retention_days
        default=DEFAULT_RETENTION.minute_rollups / timedelta(days=1),
        gt=0,
        description="keep 1-minute rollups this long",
    )
    timescaledb: Mode = Field(  # "on": require it; "off": never
        default="auto",
        description="TimescaleDB hypertables and continuous aggregates: auto (if the server has it), on, off",
    )
    hour_rollup_days: float = Field(  # at least minute_rollup_days
        default=DEFAULT_RETENTION.hour_rollups / timedelta(days=1),
        gt=0,
        description="keep 1-hour rollups and events this long",
    )
    alerts: Annotated[bool, Flag(name="--no-alerts")] = Field(  # in one replica at a time
        default=True, description="do not evaluate alert rules here"
    )
    alert_rules: Annotated[list[Path], Flag(name="--rules")] = Field(
        default=[], description="alert rules file (repeatable; default: the shipped rules, alerts/default_rules.yaml)"
    )
    notify_config: Path | None = Field(  # none: alerts are kept but not sent
        default=None, description="alert receivers, routes and inhibition (YAML)"
    )
    admin_token_file: Path | None = Field(default=None, description="bearer token allowed to create/expire silences")
    rack_budgets: Path | None = Field(  # the dashboard's --rack-budgets file
        default=None, description="YAML mapping of rack (or cluster/rack) to a budget in kW, for the rack power alert"
    )
    alert_tick_s: float = Field(
        default=TICK_S, gt=0, description="how often, in seconds, the alert engine checks group timers and due groups"
    )
    stragglers: bool = Field(default=True, description="do not run the straggler watch here")  # one replica at a time
    # Part of the onset-to-API latency, and cheap: the watch reads only new buckets.
    straggler_interval_s: float = Field(
        default=5.0, gt=0, le=300, description="how often, in seconds, the straggler watch reads what settled"
    )
    health: Annotated[bool, Flag(name="--no-health")] = Field(  # its API is served either way
        default=True, description="do not run the health loop here"
    )
    health_policy: Path | None = Field(
        default=None,
        description="fleet health policy (YAML, docs/health.md): scheduler, dry run, guard rails"
        " (default: dry run, none)",
    )
    reports_config: Path | None = Field(
        default=None,
        description="usage reports (YAML, docs/reports.md): currency, prices per GPU model, grid intensity, digests",
    )

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
        read_dsn=_read_dsn(settings),
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
    policy = load_policy(settings.health_policy) if settings.health_policy else None
    reports = load_reports_config(settings.reports_config) if settings.reports_config else None
    # The digest's files (url_file, password_file) are read beside the configuration that names them.
    base = settings.reports_config.parent if settings.reports_config else Path()
    return (
        stragglers_part(settings.straggler_interval_s, run_watch=settings.stragglers),
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


def _read_dsn(settings: CollectorSettings) -> str | None:
    """The read API's DSN, with the password file's password; None: reads share --db's."""
    if settings.read_db is None:
        return None
    return dsn_with_password_file(settings.read_db.get_secret_value(), settings.db_password_file)


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
    if settings.read_db is not None:
        if settings.db is None:
            raise ValueError("--read-db needs --db: an embedded database has no standby to read from")
        check_dsn(settings.read_db.get_secret_value())
        _read_dsn(settings)
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
        if no_primary(exc):
            raise RuntimeError(
                "no host of --db takes writes (each is a standby: a Patroni cluster with no leader, or a DSN"
                f" naming standbys only); start again once one is the primary: {first_line(exc)}"
            ) from None
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
