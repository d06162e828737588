"""`gpuscope health ...`: the fleet's health through a collector's API: nodes by state with their evidence,
the audit trail, and holds (an operator's word the health loop obeys)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gpuscope.core.collector_client import DEFAULT_COLLECTOR, collector_client, refused

STATES = ("healthy", "suspect", "unhealthy", "drained", "validating")


def add_parser(commands: Any) -> None:
    health = commands.add_parser("health", help="fleet health: states, evidence, actions, holds")
    sub = health.add_subparsers(dest="health_command", required=True, metavar="ACTION")
    status = sub.add_parser("status", help="nodes by state, the least healthy first, with their evidence")
    status.add_argument("--cluster", help="only this cluster's nodes")
    status.add_argument("--state", choices=STATES, help="only nodes in this state")
    status.add_argument("--all", action="store_true", help="list healthy nodes too (default: the others only)")
    history = sub.add_parser("history", help="the audit trail: transitions and scheduler actions")
    history.add_argument("--minutes", type=int, default=24 * 60, help="how far back (default 1440: a day)")
    hold = sub.add_parser("hold", help="hold a node: gpuscope neither drains nor resumes it")
    release = sub.add_parser("release", help="lift a hold")
    for p in (hold, release):
        p.add_argument("node", help="the node's name")
        p.add_argument("--cluster", default="default", help="its cluster (default: default)")
    hold.add_argument("--by", required=True, help="who holds it (shown with the node)")
    hold.add_argument("--reason", default="", help="why")
    for p in (status, history, hold, release):
        p.add_argument("--collector", metavar="URL", default=DEFAULT_COLLECTOR, help=f"(default {DEFAULT_COLLECTOR})")
        p.add_argument("--token-file", type=Path, help="read token (status, history) or admin token (hold, release)")
        p.add_argument("--json", action="store_true", help="print the API's JSON")
        p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    base = args.collector.rstrip("/") + "/api/v1/health"
    with collector_client(args.collector, args.token_file, timeout_s=30) as client:
        answers = _ask(client, base, args)
    if any(refused(r) for r in answers):
        return 1
    bodies = [r.json() for r in answers]
    if args.json:
        print(json.dumps(bodies[0] if len(bodies) == 1 else {"transitions": bodies[0], "actions": bodies[1]}, indent=2))
    else:
        print(_words(args, bodies))
    return 0


def _ask(client: Any, base: str, args: argparse.Namespace) -> list[Any]:
    if args.health_command == "status":
        params = {k: v for k, v in (("cluster", args.cluster), ("state", args.state)) if v}
        return [client.get(f"{base}/nodes", params=params)]
    if args.health_command == "history":
        span = {"minutes": args.minutes}
        return [client.get(f"{base}/transitions", params=span), client.get(f"{base}/actions", params=span)]
    path = f"{base}/nodes/{quote(args.cluster, safe='')}/{quote(args.node, safe='')}/hold"
    if args.health_command == "hold":
        return [client.put(path, json={"by": args.by, "reason": args.reason})]
    return [client.delete(path)]


def _words(args: argparse.Namespace, bodies: list[Any]) -> str:
    if args.health_command == "status":
        nodes = [n for n in bodies[0] if args.all or args.state or n["state"] != "healthy"]
        counts: dict[str, int] = {}
        for node in bodies[0]:
            counts[node["state"]] = counts.get(node["state"], 0) + 1
        lines = ["  ".join(f"{state}: {counts.get(state, 0)}" for state in STATES)]
        for node in nodes:
            held = f"  [held: {node['held_by']}]" if node["held_by"] else ""
            lines.append(f"{node['cluster']}/{node['node']}  {node['state']} since {node['since'] or '-'}{held}")
            if node["reason"]:
                lines.append(f"    {node['reason']}")
            lines += [f"    {e['at']}  {e['severity']:<9} {e['detail']}" for e in node["evidence"][:5]]
        return "\n".join(lines)
    if args.health_command == "history":
        lines = [f"{t['at']}  {t['cluster']}/{t['node']}  {t['from']} -> {t['to']}  ({t['actor']}): {t['reason']}"
                 for t in bodies[0]]  # fmt: skip
        lines += [f"{a['at']}  {a['cluster']}/{a['node']}  {a['action']}"
                  f"{' (dry run)' if a['dry_run'] else ''}: {a['detail']}" for a in bodies[1]]  # fmt: skip
        return "\n".join(lines) or "nothing happened in this range"
    body = bodies[0]
    return f"{body['cluster']}/{body['node']}: " + (f"held by {body['held_by']}" if body["held_by"] else "hold lifted")
