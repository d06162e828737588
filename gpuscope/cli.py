"""The `gpuscope` command: one subcommand per service, wiring only."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from gpuscope.alerts import cli as alerts_cli
from gpuscope.core.listen import parse_listen
from gpuscope.core.logredact import configure_logging
from gpuscope.core.ports import PortInUse, ensure_free
from gpuscope.core.settings_flags import add_flags, converter, number, settings_from, settings_values
from gpuscope.core.tokens import dsn_with_password_file
from gpuscope.health import cli as health_cli
from gpuscope.reports import cli as reports_cli


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ValueError, OSError, RuntimeError) as exc:
        # Configuration and environment problems: one clear line, no traceback.
        print(f"gpuscope {args.command}: error: {_in_words(exc)}", file=sys.stderr)
        return 2


def _in_words(exc: Exception) -> str:
    """The error as a sentence. Settings refused by pydantic (a ValueError) list their problems, without
    pydantic's report around them (its type codes, the input echoed, a link)."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return str(exc)
    problems = []
    for error in errors():
        where = ".".join(str(part) for part in error.get("loc", ()))
        message = str(error.get("msg", "")).removeprefix("Value error, ")
        problems.append(f"{where}: {message}" if where else message)
    return "; ".join(problems)


def setup_logging(verbose: bool = False, stream: TextIO | None = None) -> logging.Handler | None:
    """The logging of every command: ours at INFO (DEBUG with -v) to stderr, or to `stream` (tests pass
    one to read what an operator would); the libraries that log URLs, headers or DSNs at WARNING; every
    line redacted of secrets (gpuscope/core/logredact.py). Returns the handler it added, if any."""
    return configure_logging(logging.DEBUG if verbose else logging.INFO, stream=stream)


class _Parser(argparse.ArgumentParser):
    """An argument parser that refuses an option it does not know itself, with its own usage: argparse
    leaves a subcommand's unknown options to the top-level parser, which shows `gpuscope`'s usage (the
    subcommands' parsers are of this class too: add_subparsers makes them like their parent).

    `flags` adds options when they are first needed (to parse, or to show help): a service's come from
    its settings class, whose module need not be importable for another command."""

    def __init__(self, *args: Any, flags: Callable[[argparse.ArgumentParser], None] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._pending_flags = flags

    def with_all_flags(self) -> _Parser:
        if self._pending_flags is not None:
            add, self._pending_flags = self._pending_flags, None
            try:
                add(self)
            except ModuleNotFoundError as exc:  # an exporter's node: the base install only
                if (exc.name or "").startswith("gpuscope"):
                    raise
                self.error(f"needs gpuscope's server extra (pip install 'gpuscope[server]'): {exc}")
        return self

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> tuple[Any, list[str]]:
        self.with_all_flags()
        parsed, unknown = super().parse_known_args(args, namespace)
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}")
        return parsed, unknown

    def format_usage(self) -> str:
        self.with_all_flags()
        return super().format_usage()

    def format_help(self) -> str:
        self.with_all_flags()
        return super().format_help()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpuscope")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gpuscope", description="GPU cluster telemetry.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"gpuscope {_version()}", help="print the version")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="embedded database + collector + simulated cluster + dashboard")
    demo.add_argument("--nodes", type=_positive_int, default=16, help="simulated nodes (default 16)")
    demo.add_argument("--gpus-per-node", type=_positive_int, default=8, help="GPUs per node (default 8)")
    demo.add_argument("--racks", type=_positive_int, default=4, help="racks the nodes are spread over (default 4)")
    demo.add_argument("--seed", type=int, default=42, help="the simulation's random seed (default 42)")
    demo.add_argument(
        "--dashboard-port", type=_port, default=8050, help="the dashboard's port on 127.0.0.1 (default 8050)"
    )
    demo.add_argument(
        "--collector-port", type=_port, default=9410, help="the collector's port on 127.0.0.1 (default 9410)"
    )
    demo.add_argument("--interval", type=_positive_float, default=1.0, help="sampling interval in seconds")
    demo.add_argument(
        "--backfill-minutes", type=_non_negative_float, default=60.0, help="simulated history to load first"
    )
    demo.add_argument("--data-dir", type=Path, help="keep the database here (default: temporary)")
    demo.set_defaults(run=_run_demo)

    # Each service's options are made from its settings (gpuscope/core/settings_flags.py), when that
    # command is used: an exporter's node has none of the server stack the collector's settings import.
    exporter = commands.add_parser(
        "exporter", help="per-node exporter: /metrics and push to a collector", flags=_exporter_flags
    )
    exporter.set_defaults(run=_run_exporter)
    collector = commands.add_parser("collector", help="ingest API and read API over PostgreSQL", flags=_collector_flags)
    collector.set_defaults(run=_run_collector)
    dashboard = commands.add_parser("dashboard", help="the web UI", flags=_dashboard_flags)
    dashboard.set_defaults(run=_run_dashboard)
    alerts_cli.add_parser(commands)
    health_cli.add_parser(commands)
    reports_cli.add_parser(commands)

    bench = commands.add_parser("bench", help="measure against the project's targets")
    bench.add_argument(
        "target",
        choices=[
            "exporter",
            "ingest",
            "query",
            "stragglers",
            "alerts",
            "dashboard",
            "health",
            "reports",
            "scale",
            "peers",
            "federation",
        ],
        help="what to measure",
    )
    bench.add_argument("--json", action="store_true", help="also print one JSON object on the last line")
    bench.add_argument(
        "--workers", type=_positive_int, default=1, help="ingest: collector worker processes (default 1)"
    )
    bench.add_argument("--gpus", type=_positive_int, default=100_000, help="scale: fleet size")
    bench.add_argument(
        "--collectors",
        type=_positive_int,
        default=1,
        help="scale: the straggler watch sharded over this many processes, as over K collectors (default 1)",
    )
    bench.add_argument(
        "--end-to-end",
        action="store_true",
        help="stragglers: stream jobs live through the ingest API into a real collector, score /api/v1/stragglers",
    )
    bench.add_argument(
        "--push-s",
        type=_positive_int,
        default=10,
        help="stragglers --end-to-end: seconds between an exporter's pushes (default 10; sites use up to 60)",
    )
    bench.add_argument(
        "--instances", type=_positive_int, default=2, help="federation: cluster PostgreSQL instances (default 2)"
    )
    bench.add_argument(
        "--gpus-per-instance", type=_positive_int, default=256, help="federation: GPUs per instance (default 256)"
    )
    bench.add_argument("--hours", type=_positive_int, default=6, help="federation: hours of samples (default 6)")
    bench.set_defaults(run=_run_bench)
    return parser


def _run_bench(args: argparse.Namespace) -> None:
    try:
        from gpuscope.bench import alerts as alerts_bench
    except ModuleNotFoundError as exc:
        if exc.name != "gpuscope.bench":
            raise
        # A distribution of its own, gpuscope-bench, so that GPU nodes do not carry it (packaging/bench).
        raise RuntimeError(
            "the bench is not installed: it is the gpuscope-bench distribution,"
            " pip install ./packaging/bench from a gpuscope checkout"
        ) from None
    from gpuscope.bench import dashboard as dashboard_bench
    from gpuscope.bench import exporter, health_evidence, ingest, peers, query, scale, stragglers, stragglers_live
    from gpuscope.bench import federation as federation_bench
    from gpuscope.bench import reports as reports_bench
    from gpuscope.bench.report import emit

    logging.getLogger().setLevel(logging.WARNING)
    runs = {
        "exporter": exporter.run,
        "ingest": lambda: ingest.run(args.workers),
        "query": query.run,
        "stragglers": (lambda: stragglers_live.run(float(args.push_s))) if args.end_to_end else stragglers.run,
        "alerts": alerts_bench.run,
        "dashboard": dashboard_bench.run,
        "health": health_evidence.run,
        "reports": reports_bench.run,
        "scale": lambda: scale.run(args.gpus, collectors=args.collectors),
        "peers": peers.run,
        "federation": lambda: federation_bench.run(args.instances, args.gpus_per_instance, args.hours),
    }
    emit(args.target, runs[args.target](), args.json)


def _run_demo(args: argparse.Namespace) -> None:
    from gpuscope.demo import HOST, DemoOptions, run_demo

    if args.dashboard_port == args.collector_port != 0:
        raise ValueError(f"--dashboard-port and --collector-port are both {args.dashboard_port}: give two ports")
    for port in (args.dashboard_port, args.collector_port):
        _ensure_free(HOST, port, "another gpuscope demo?", "--dashboard-port/--collector-port")
    run_demo(
        DemoOptions(
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
            racks=args.racks,
            seed=args.seed,
            dashboard_port=args.dashboard_port,
            collector_port=args.collector_port,
            interval=args.interval,
            backfill_minutes=args.backfill_minutes,
            data_dir=args.data_dir,
        )
    )


def _exporter_flags(parser: argparse.ArgumentParser) -> None:
    from gpuscope.exporter_process import ExporterSettings

    add_flags(parser, ExporterSettings)


def _run_exporter(args: argparse.Namespace) -> None:
    from gpuscope import exporter_process

    exporter_process.run(settings_from(exporter_process.ExporterSettings, args))


def _collector_flags(parser: argparse.ArgumentParser) -> None:
    from gpuscope.collector_process import CollectorSettings

    add_flags(parser, CollectorSettings)


def _run_collector(args: argparse.Namespace) -> int:
    from gpuscope import collector_process

    settings = settings_from(collector_process.CollectorSettings, args)
    _ensure_free(*parse_listen(settings.listen), "another gpuscope collector?", "--listen HOST:PORT")
    return collector_process.run(settings)


def _dashboard_flags(parser: argparse.ArgumentParser) -> None:
    from gpuscope.dashboard_process import DashboardSettings

    add_flags(parser, DashboardSettings)
    # Not settings of the running dashboard: another way to find its database, and another job.
    parser.add_argument(
        "--db-password-file", type=Path, help="the database password, kept out of the DSN and the command line"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="instead of --db: the embedded database of the collector running with this --data-dir (same host)",
    )
    parser.add_argument("--hash-password", action="store_true", help="read a password, print a basic-auth hash")


def _run_dashboard(args: argparse.Namespace) -> None:
    from gpuscope import dashboard_process
    from gpuscope.dashboard.auth import hash_password

    if args.hash_password:
        import getpass

        password = getpass.getpass("password: ")
        if not password:
            raise ValueError("the password is empty: a login with no password protects nothing")
        print(hash_password(password))
        return
    values = settings_values(dashboard_process.DashboardSettings, args)
    values["db"] = _dashboard_dsn(args, values.get("db"))
    settings = dashboard_process.DashboardSettings(**values)
    _ensure_free(*parse_listen(settings.listen), "another gpuscope dashboard?", "--listen HOST:PORT")
    dashboard_process.run(settings)


def _dashboard_dsn(args: argparse.Namespace, db: str | None) -> str:
    """The database the dashboard reads: `db` (--db, else $GPUSCOPE_DASHBOARD_DB), or a collector's embedded
    one (--data-dir)."""
    if args.data_dir is None:
        from gpuscope.core.dsn import check_dsn  # psycopg: the server stack's, not the exporter's

        if not db:
            raise ValueError(
                "--db DSN is required (the collector's database, or a replica of it), or --data-dir DIR"
                " for the embedded database of a collector on this host"
            )
        check_dsn(db)  # now, in one line: a pool would retry a DSN that cannot parse forever
        return dsn_with_password_file(db, args.db_password_file)
    from gpuscope.core.embedded_pg import running_dsn

    if "db" in vars(args):  # given on the command line; $GPUSCOPE_DASHBOARD_DB gives way to --data-dir
        raise ValueError("--db and --data-dir both say where the database is: give one of them")
    if args.db_password_file is not None:
        where = args.data_dir
        raise ValueError(f"--db-password-file goes with --db: with --data-dir the password is read from {where}")
    return running_dsn(args.data_dir)


def _ensure_free(host: str, port: int, guess: str, options: str) -> None:
    """Fail before starting anything when something listens on host:port, naming the port and the way out."""
    try:
        ensure_free(host, port)
    except PortInUse as exc:
        raise OSError(f"{exc} ({guess}): stop it, or pass {options}") from None


# The demo's and the bench's options, checked as the services' are (their settings' bounds).
_positive_int = converter(int, {"ge": 1})
_positive_float = converter(float, {"gt": 0})
_non_negative_float = converter(float, {"ge": 0})


def _port(text: str) -> int:
    value = int(number(int, text))
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port (0-65535), got {value}")
    return value


if __name__ == "__main__":
    sys.exit(main())
