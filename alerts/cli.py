"""`gpuscope alerts ...`: check a rules file, send a test notification, manage silences."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any

from gpuscope.core.collector_client import DEFAULT_COLLECTOR, collector_client, refused


def add_parser(commands: Any) -> None:
    alerts = commands.add_parser("alerts", help="alert rules, test notifications, silences")
    sub = alerts.add_subparsers(dest="alerts_command", required=True, metavar="ACTION")

    check = sub.add_parser("check", help="validate a rules file, its SQL included")
    check.add_argument("rules", type=Path, help="rules file (YAML, Prometheus rule-file shape, SQL in expr)")
    check.add_argument("--db", help="check against this database (default: a private PostgreSQL started for it)")
    check.add_argument(
        "--db-password-file", type=Path, help="the database password, kept out of the DSN and the command line"
    )
    check.add_argument("--notify-config", type=Path, help="also validate this notification file")
    check.set_defaults(run=_check)

    notify = sub.add_parser("test-notify", help="send one sample alert and print the HTTP outcome")
    notify.add_argument("--kind", required=True, choices=_kinds(), help="the chat service or webhook format")
    url = notify.add_mutually_exclusive_group(required=True)
    url.add_argument("--url", help="webhook URL (visible to other local users: prefer --url-file)")
    url.add_argument("--url-file", type=Path, help="file holding the webhook URL")
    notify.add_argument("--resolved", action="store_true", help="send the sample as resolved")
    notify.set_defaults(run=_test_notify)

    silence = sub.add_parser("silence", help="create, expire or list silences through a collector")
    silence_sub = silence.add_subparsers(dest="silence_command", required=True, metavar="ACTION")
    for name, help_text in (("add", "mute matching alerts for a while"), ("expire", "end a silence now"),
                            ("list", "show active silences")):  # fmt: skip
        p = silence_sub.add_parser(name, help=help_text)
        p.add_argument(
            "--collector",
            metavar="URL",
            default=DEFAULT_COLLECTOR,
            help=f"collector base URL (default {DEFAULT_COLLECTOR})",
        )
        p.add_argument("--token-file", type=Path, help="admin token (add, expire) or read token (list)")
        if name == "add":
            p.add_argument("-m", "--matcher", action="append", required=True, help="e.g. node=gpu-07 (repeatable)")
            p.add_argument("--duration", default="2h", help="how long, e.g. 30m, 2h (default 2h)")
            p.add_argument("--comment", default="", help="why")
            p.add_argument("--created-by", default="cli", help="who made it, shown with the silence (default cli)")
        if name == "expire":
            p.add_argument("id", type=int, help="the silence's id (see `silence list`)")
        if name == "list":
            p.add_argument("--all", action="store_true", help="include expired silences")
        p.set_defaults(run=_silence)


def _kinds() -> list[str]:
    return ["slack", "teams", "discord", "mattermost", "googlechat", "webhook", "alertmanager"]


def _check(args: argparse.Namespace) -> int:
    from gpuscope.alerts.check import check_sql, promql_rules, scratch_database
    from gpuscope.alerts.config import ConfigError, load_notify_config
    from gpuscope.alerts.rules import RulesError, load_rules_file

    promql = promql_rules(args.rules)
    if promql:
        print(
            f"{args.rules} is a Prometheus rules file (PromQL, e.g. rule {promql[0]}): check it with "
            f"`promtool check rules {args.rules}`; `gpuscope alerts check` reads gpuscope's own rules, "
            "written in SQL (see docs/alerts.md).",
            file=sys.stderr,
        )
        return 1
    try:
        groups = load_rules_file(args.rules)
    except RulesError as exc:
        for problem in exc.problems:
            print(f"{exc.source}: {problem}", file=sys.stderr)
        return 1
    if args.notify_config:
        try:
            load_notify_config(args.notify_config)
        except ConfigError as exc:
            print(str(exc), file=sys.stderr)
            return 1
    if args.db:
        problems = check_sql(_database(args.db, args.db_password_file), groups)
    else:
        if args.db_password_file:
            raise ValueError("--db-password-file goes with --db (a DSN without its password)")
        with scratch_database() as dsn:
            problems = check_sql(dsn, groups)
    for problem in problems:
        print(f"{args.rules}: {problem}", file=sys.stderr)
    rules = sum(len(g.rules) for g in groups)
    if problems:
        return 1
    print(f"{args.rules}: {len(groups)} groups, {rules} rules: OK")
    return 0


def _database(dsn: str, password_file: Path | None) -> str:
    """The DSN given with --db, with the password from --db-password-file, once it is known to connect:
    a wrong one is one line (main() prints it), not psycopg's traceback."""
    import psycopg

    from gpuscope.core.dsn import check_dsn, first_line
    from gpuscope.core.tokens import dsn_with_password_file

    check_dsn(dsn)
    dsn = dsn_with_password_file(dsn, password_file)
    try:
        psycopg.connect(dsn, connect_timeout=10).close()
    except psycopg.OperationalError as exc:
        reason = first_line(exc)
        hint = "" if password_file or "password" not in reason else " (give it with --db-password-file FILE)"
        raise RuntimeError(f"cannot connect to the database given with --db: {reason}{hint}") from None
    return dsn


def _test_notify(args: argparse.Namespace) -> int:
    import asyncio

    import httpx

    from gpuscope.alerts.notify import KINDS
    from gpuscope.alerts.notify.post import post
    from gpuscope.alerts.redact import redact_url

    url = args.url if args.url else args.url_file.read_text(encoding="utf-8").strip()
    if not url.startswith(("http://", "https://")):
        raise ValueError("the URL must start with http:// or https://")
    message = sample_message(resolved=args.resolved)

    async def send() -> Any:
        async with httpx.AsyncClient() as client:
            return await post(client, args.kind, url, KINDS[args.kind](message))

    started = time.perf_counter()
    outcome = asyncio.run(send())
    took = (time.perf_counter() - started) * 1000
    print(f"{args.kind} {redact_url(url)}: {outcome.detail} ({outcome.result}) in {took:.0f} ms")
    if outcome.wait_s is not None:
        print(f"the service asks to retry after {outcome.wait_s:g} s")
    return 0 if outcome.result == "sent" else 1


def sample_message(resolved: bool = False) -> Any:
    from gpuscope.alerts.notify.message import Alert, Message
    from gpuscope.core.timefmt import rfc3339

    now = dt.datetime.now(dt.UTC)
    labels = {"alertname": "GpuOverTemperature", "severity": "warning", "cluster": "demo", "node": "gpu-node-01",
              "gpu": "3", "uuid": "GPU-00000000-0000-0000-0000-000000000003"}  # fmt: skip
    alert = Alert(
        status="resolved" if resolved else "firing",
        labels=labels,
        annotations={
            "summary": "GPU 3 on gpu-node-01 is at 91 °C (gpuscope test notification)",
            "description": "Sent by `gpuscope alerts test-notify`; nothing is wrong.",
        },
        starts_at=rfc3339(now - dt.timedelta(minutes=3)),
        ends_at=rfc3339(now) if resolved else None,
        fingerprint="0000000000000000",
        generator_url="http://127.0.0.1:8050/alerts",
        value=91.0,
    )
    return Message("test", "test:{}", {"alertname": "GpuOverTemperature"}, (alert,), "http://127.0.0.1:8050")


def _silence(args: argparse.Namespace) -> int:
    from gpuscope.alerts.duration import parse_duration

    base = args.collector.rstrip("/") + "/api/v1/silences"
    with collector_client(args.collector, args.token_file, timeout_s=10) as client:
        if args.silence_command == "add":
            seconds = parse_duration(args.duration, "--duration")
            body = {"matchers": args.matcher, "duration_s": seconds, "comment": args.comment,
                    "created_by": args.created_by}  # fmt: skip
            response = client.post(base, json=body)
        elif args.silence_command == "expire":
            response = client.delete(f"{base}/{args.id}")
        else:
            response = client.get(base, params={"all": "true"} if args.all else None)
    if refused(response):
        return 1
    print(json.dumps(response.json(), indent=2))
    return 0
