"""`gpuscope health replay --policy FILE --start --end`: the file is checked here first (its errors name
the file, the key and the line), then the collector replays it over the stored history and the answer is
printed: the candidate beside the live policy."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuscope.core.collector_client import DEFAULT_COLLECTOR, collector_client, refused


def add_replay_parser(sub: Any) -> None:
    replay = sub.add_parser("replay", help="what a candidate policy would have done over a stored window")
    replay.add_argument("--policy", type=Path, required=True, help="the candidate policy file (YAML)")
    replay.add_argument("--start", type=_when, required=True, help="the window's start, ISO 8601 (UTC if no zone)")
    replay.add_argument("--end", type=_when, required=True, help="its end, ISO 8601")
    replay.add_argument("--collector", metavar="URL", default=DEFAULT_COLLECTOR, help=f"(default {DEFAULT_COLLECTOR})")
    replay.add_argument("--token-file", type=Path, help="read token")
    replay.add_argument("--json", action="store_true", help="print the API's JSON")
    replay.set_defaults(run=_run)


def _when(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a time in ISO 8601 (2026-11-01T00:00Z), got {text!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _run(args: argparse.Namespace) -> int:
    # Imported here: the policy's model needs the server's libraries, which a GPU node's install (the
    # exporter, this same command) does not have.
    from gpuscope.health.policy import PolicyError, load_policy

    try:
        load_policy(args.policy)
    except PolicyError as exc:
        print(f"gpuscope: error: {exc}", file=sys.stderr)
        return 2
    if args.end <= args.start:
        print(f"gpuscope: error: --end ({args.end:%Y-%m-%dT%H:%M%z}) must be after --start", file=sys.stderr)
        return 2
    body = {"policy": args.policy.read_text(encoding="utf-8"), "start": args.start.isoformat(),
            "end": args.end.isoformat()}  # fmt: skip
    with collector_client(args.collector, args.token_file, timeout_s=300) as client:
        answer = client.get(args.collector.rstrip("/") + "/api/v1/health/replay", params=body)
    if refused(answer):
        return 1
    print(json.dumps(answer.json(), indent=2) if args.json else _words(answer.json()))
    return 0


def _words(answer: dict[str, Any]) -> str:
    lines = [
        f"replay {answer['start']} .. {answer['end']}: {answer['findings']} findings on {answer['nodes']} nodes",
        "",
    ]
    rows: list[tuple[str, str | tuple[str, str]]] = [
        ("drains", "drains"),
        ("refused: max_drained", ("refusals", "max_drained")),
        ("refused: max_drains_per_hour", ("refusals", "max_drains_per_hour")),
        ("refused: protected jobs", ("refusals", "protect")),
        ("GPU-hours out", "gpu_hours_out"),
        ("jobs hit", "jobs_hit"),
        ("held for inspection", "held_for_inspection"),
    ]
    lines.append(f"{'':30} {'candidate':>12} {'live':>12}")
    for label, key in rows:
        got = [_get(answer[side], key) for side in ("candidate", "live")]
        lines.append(f"{label:30} {got[0]:>12} {got[1]:>12}")
    repairs = answer["candidate"]["repairs"]
    if repairs:
        lines.append("candidate's repairs: " + ", ".join(f"{step} {n}" for step, n in repairs.items()))
    if answer["live"].get("dry_run_drains"):
        lines.append(f"the live policy's dry run recorded {answer['live']['dry_run_drains']} drains it did not run")
    lines += ["", "assumed: " + "; ".join(answer["assumptions"])]
    return "\n".join(lines)


def _get(side: dict[str, Any], key: str | tuple[str, str]) -> Any:
    value = side[key[0]][key[1]] if isinstance(key, tuple) else side[key]
    return f"{value:.1f}" if isinstance(value, float) else value
