"""The `gpuscope` command: one subcommand per service, wiring only."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any, TextIO

from gpuscope.alerts import cli as alerts_cli
from gpuscope.core.listen import parse_listen
from gpuscope.core.logredact import configure_logging
from gpuscope.core.ports import PortInUse, ensure_free
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
    subcommands' parsers are of this class too: add_subparsers makes them like their parent)."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> tuple[Any, list[str]]:
        parsed, unknown = super().parse_known_args(args, namespace)
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}")
        return parsed, unknown


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

    exporter = commands.add_parser("exporter", help="per-node exporter: /metrics and push to a collector")
    exporter.add_argument(
        "--backend",
        choices=["auto", "nvml", "amdsmi", "sim"],
        default="auto",
        help="what reads the GPUs (auto: NVML, else amdsmi; sim: a simulated node, no GPU needed)",
    )
    exporter.add_argument("--listen", default=":9400", help="HOST:PORT for /metrics (default :9400, all interfaces)")
    exporter.add_argument("--push", metavar="URL", help="collector base URL, e.g. http://collector:9410")
    exporter.add_argument("--interval", type=_positive_float, default=5.0, help="sampling interval in seconds")
    exporter.add_argument(
        "--push-interval",
        type=_non_negative_float,
        default=10.0,
        help="send the snapshots of this many seconds together (default 10; 0: each as soon as it is taken)",
    )
    exporter.add_argument("--node", default=socket.gethostname(), help="this node's name (default: the host name)")
    exporter.add_argument("--rack", default="default", help="the rack it stands in, for power per rack")
    exporter.add_argument("--cluster", default="default", help="the cluster it belongs to")
    exporter.add_argument("--token-file", type=Path, help="file holding the collector's bearer token")
    exporter.add_argument("--spool-dir", type=Path, help="keep unsent batches here while the collector is away")
    exporter.add_argument(
        "--jobs",
        choices=["auto", "slurm", "k8s", "none"],
        default="auto",
        help="job attribution (auto: Slurm if the node has it, else Kubernetes if the kubelet's socket is there)",
    )
    exporter.add_argument(
        "--pod-resources-socket",
        type=Path,
        default=Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
        help="the kubelet's pod-resources API (Kubernetes)",
    )
    exporter.add_argument(
        "--pod-metadata",
        choices=["auto", "apiserver", "kubelet", "none"],
        default="auto",
        help="where pod labels (which pods make one job) come from; auto: the API server in a pod, else the kubelet",
    )
    exporter.add_argument(
        "--kubelet-pods-url",
        default="http://127.0.0.1:10255/pods",
        help="the kubelet's read-only pod list, for --pod-metadata kubelet",
    )
    exporter.add_argument(
        "--slurm-mapping-dir",
        type=Path,
        help="per-GPU job files written by deploy/slurm/prolog.sh "
        "(default: map_dir in gpuscope.conf beside slurm.conf, as the prolog reads it, else /run/gpuscope/slurm)",
    )
    exporter.add_argument(
        "--dcgm-compat", action="store_true", help="serve dcgm-exporter's metric names too (NVIDIA GPUs; docs/)"
    )
    exporter.add_argument(
        "--amd-compat", action="store_true", help="serve AMD device-metrics-exporter's metric names too (AMD GPUs)"
    )
    exporter.add_argument(
        "--compat-only", action="store_true", help="serve only the compatible names chosen, not gpuscope's own"
    )
    exporter.add_argument("--ib-root", type=Path, default=Path("/sys/class/infiniband"), help=argparse.SUPPRESS)
    exporter.add_argument("--sim-seed", type=int, default=0, help="seed for --backend sim")
    exporter.add_argument("--sim-gpus", type=_positive_int, default=8, help="GPUs for --backend sim")
    exporter.set_defaults(run=_run_exporter)

    collector = commands.add_parser("collector", help="ingest API and read API over PostgreSQL")
    collector.add_argument("--listen", help="HOST:PORT (default 0.0.0.0:9410)")
    collector.add_argument(
        "--db", help="PostgreSQL DSN (default: $GPUSCOPE_COLLECTOR_DB, else an embedded server in --data-dir)"
    )
    collector.add_argument(
        "--db-password-file", type=Path, help="the database password, kept out of the DSN and the command line"
    )
    collector.add_argument(
        "--data-dir",
        type=Path,
        help="the embedded database (without --db) and generated token live here"
        " (default: /var/lib/gpuscope as root, else ~/.local/share/gpuscope)",
    )
    collector.add_argument("--token-file", type=Path, help="ingest bearer token (default: generated in --data-dir)")
    collector.add_argument(
        "--node-tokens-file", type=Path, help="per-node ingest tokens, 'CLUSTER/NODE TOKEN' per line"
    )
    collector.add_argument("--retention-days", type=_positive_float, help="keep raw samples this long (default 30)")
    collector.add_argument(
        "--minute-rollup-days", type=_positive_float, help="keep 1-minute rollups this long (default 90)"
    )
    collector.add_argument(
        "--hour-rollup-days", type=_positive_float, help="keep 1-hour rollups and events this long (default 730)"
    )
    collector.add_argument(
        "--timescaledb",
        choices=["auto", "on", "off"],
        help="TimescaleDB hypertables and continuous aggregates: auto (default: if the server has it), on, off",
    )
    collector.add_argument(
        "--workers", type=_positive_int, help="collector processes sharing the port, one core each (default 1)"
    )
    collector.add_argument("--read-token-file", type=Path, help="require this bearer token on the read API")
    collector.add_argument(
        "--rules", type=Path, action="append", help="alert rules file (repeatable; default: the shipped rules)"
    )
    collector.add_argument("--notify-config", type=Path, help="alert receivers, routes and inhibition (YAML)")
    collector.add_argument("--admin-token-file", type=Path, help="bearer token allowed to create/expire silences")
    collector.add_argument("--no-alerts", action="store_true", help="do not evaluate alert rules here")
    collector.add_argument(
        "--rack-budgets",
        type=Path,
        help="YAML mapping of rack (or cluster/rack) to a budget in kW, for the rack power alert",
    )
    collector.add_argument(
        "--health-policy",
        type=Path,
        help="fleet health policy (YAML, docs/health.md): scheduler, dry run, guard rails (default: dry run, none)",
    )
    collector.add_argument("--no-health", action="store_true", help="do not run the health loop here")
    collector.add_argument(
        "--reports-config",
        type=Path,
        help="usage reports (YAML, docs/reports.md): currency, prices per GPU model, grid intensity, digests",
    )
    collector.set_defaults(run=_run_collector)

    dashboard = commands.add_parser("dashboard", help="the web UI")
    dashboard.add_argument("--listen", default="127.0.0.1:8050", help="HOST:PORT (default 127.0.0.1:8050)")
    dashboard.add_argument(
        "--db",
        help="PostgreSQL DSN of the collector's database, a read replica will do (default: $GPUSCOPE_DASHBOARD_DB)",
    )
    dashboard.add_argument(
        "--db-password-file", type=Path, help="the database password, kept out of the DSN and the command line"
    )
    dashboard.add_argument(
        "--data-dir",
        type=Path,
        help="instead of --db: the embedded database of the collector running with this --data-dir (same host)",
    )
    dashboard.add_argument(
        "--workers", type=_positive_int, default=2, help="gunicorn worker processes, 4 threads each (default 2)"
    )
    dashboard.add_argument("--collector", metavar="URL", help="collector base URL: silences are managed through it")
    dashboard.add_argument("--basic-auth-file", type=Path, help="require a login: 'user:pbkdf2_sha256$...' lines")
    dashboard.add_argument("--rack-budgets", type=Path, help="YAML mapping of rack (or cluster/rack) to a budget in kW")
    dashboard.add_argument(
        "--reports-config",
        type=Path,
        help="the Reports page's currency, prices per GPU model and grid intensity (YAML, docs/reports.md)",
    )
    dashboard.add_argument(
        "--max-body-bytes", type=_positive_int, help="refuse larger request bodies with 413 (default 1 MiB)"
    )
    dashboard.add_argument("--hash-password", action="store_true", help="read a password, print a basic-auth hash")
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
        ],
        help="what to measure",
    )
    bench.add_argument("--json", action="store_true", help="also print one JSON object on the last line")
    bench.add_argument(
        "--workers", type=_positive_int, default=1, help="ingest: collector worker processes (default 1)"
    )
    bench.add_argument("--gpus", type=_positive_int, default=100_000, help="scale: fleet size")
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
    bench.set_defaults(run=_run_bench)
    return parser


def _run_bench(args: argparse.Namespace) -> None:
    from gpuscope.bench import alerts as alerts_bench
    from gpuscope.bench import dashboard as dashboard_bench
    from gpuscope.bench import exporter, health_evidence, ingest, peers, query, scale, stragglers, stragglers_live
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
        "scale": lambda: scale.run(args.gpus),
        "peers": peers.run,
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


def _run_exporter(args: argparse.Namespace) -> None:
    from gpuscope import exporter_process

    fields = exporter_process.ExporterSettings.__dataclass_fields__
    exporter_process.run(exporter_process.ExporterSettings(**{k: v for k, v in vars(args).items() if k in fields}))


def _run_collector(args: argparse.Namespace) -> int:
    from gpuscope import collector_process

    overrides = {
        key: value
        for key, value in {
            "listen": args.listen,
            "db": args.db,
            "db_password_file": args.db_password_file,
            "data_dir": args.data_dir,
            "token_file": args.token_file,
            "node_tokens_file": args.node_tokens_file,
            "read_token_file": args.read_token_file,
            "retention_days": args.retention_days,
            "minute_rollup_days": args.minute_rollup_days,
            "hour_rollup_days": args.hour_rollup_days,
            "timescaledb": args.timescaledb,
            "workers": args.workers,
            "alert_rules": args.rules,
            "notify_config": args.notify_config,
            "admin_token_file": args.admin_token_file,
            "alerts": False if args.no_alerts else None,
            "rack_budgets": args.rack_budgets,
            "health_policy": args.health_policy,
            "health": False if args.no_health else None,
            "reports_config": args.reports_config,
        }.items()
        if value is not None
    }
    settings = collector_process.CollectorSettings(**overrides)
    _ensure_free(*parse_listen(settings.listen), "another gpuscope collector?", "--listen HOST:PORT")
    return collector_process.run(settings)


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
    db = _dashboard_dsn(args)
    _ensure_free(*parse_listen(args.listen), "another gpuscope dashboard?", "--listen HOST:PORT")
    dashboard_process.run(
        dashboard_process.DashboardSettings(
            db=db,
            listen=args.listen,
            collector_url=args.collector,
            basic_auth_file=args.basic_auth_file,
            rack_budgets_file=args.rack_budgets,
            max_body_bytes=args.max_body_bytes,
            reports_config=args.reports_config,
            workers=args.workers,
        )
    )


def _dashboard_dsn(args: argparse.Namespace) -> str:
    """The database the dashboard reads: --db (or $GPUSCOPE_DASHBOARD_DB), or a collector's embedded one."""
    if args.data_dir is None:
        from gpuscope.core.dsn import check_dsn  # psycopg: the server stack's, not the exporter's

        db = args.db or os.environ.get("GPUSCOPE_DASHBOARD_DB")
        if not db:
            raise ValueError(
                "--db DSN is required (the collector's database, or a replica of it), or --data-dir DIR"
                " for the embedded database of a collector on this host"
            )
        check_dsn(db)  # now, in one line: a pool would retry a DSN that cannot parse forever
        return dsn_with_password_file(db, args.db_password_file)
    from gpuscope.core.embedded_pg import running_dsn

    if args.db is not None:
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


def _positive_int(text: str) -> int:
    value = _number(int, text, "a whole number")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = _number(float, text, "a number")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = _number(float, text, "a number")
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _port(text: str) -> int:
    value = _number(int, text, "a TCP port (0-65535)")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port (0-65535), got {value}")
    return value


def _number(kind: type[int] | type[float], text: str, what: str) -> Any:
    """`text` as `kind`; otherwise an error in words (argparse would say "invalid _positive_int value")."""
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None


if __name__ == "__main__":
    sys.exit(main())
