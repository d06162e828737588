"""`gpuscope health ...`: the fleet's health through a collector's API: nodes by state with their evidence,
the audit trail, episodes and how their repairs held (in words: health/episode_words.py), and holds (an
operator's word the health loop obeys). Bad input is refused here, in one line, before the collector is
asked."""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gpuscope.core.collector_client import DEFAULT_COLLECTOR, collector_client, refused
from gpuscope.core.range_presets import PRESETS_S
from gpuscope.health.episode_words import episode_words, episodes_words, repairs_words
from gpuscope.health.model import State
from gpuscope.health.replay_cli import add_replay_parser

STATES = tuple(str(state) for state in State)
HELD = "held"  # not a state: nodes an operator holds, whatever their state
MAX_MINUTES = 800 * 24 * 60  # the API's longest range (MAX_RANGE, collector/api/params.py)
MAX_EPISODE_ID = 2**63 - 1  # bigint, as the API takes it


def add_parser(commands: Any) -> None:
    health = commands.add_parser("health", help="fleet health: states, evidence, actions, holds")
    sub = health.add_subparsers(dest="health_command", required=True, metavar="ACTION")
    add_replay_parser(sub)  # its own options and runner: health/replay_cli.py
    status = sub.add_parser("status", help="nodes by state, the least healthy first, with their evidence")
    status.add_argument("--cluster", help="only this cluster's nodes")
    status.add_argument("--state", choices=(*STATES, HELD), help="only nodes in this state, or held by an operator")
    status.add_argument("--all", action="store_true", help="list healthy nodes too (default: the others only)")
    history = sub.add_parser("history", help="the audit trail: transitions and scheduler actions")
    _window(history, 24 * 60, "a day")
    episodes = sub.add_parser("episodes", help="each time a node left healthy: cause, repair, time out, what followed")
    episodes.add_argument("--node", help="only nodes of this name")
    episodes.add_argument("--cluster", help="only this cluster's nodes")
    episodes.add_argument("--gpu", metavar="UUID", help="only episodes naming this GPU")
    _window(episodes, 7 * 24 * 60, "a week")
    episode = sub.add_parser("episode", help="one episode with its evidence and scheduler actions")
    episode.add_argument("episode_id", metavar="ID", type=_episode_id, help="its id (see gpuscope health episodes)")
    repairs = sub.add_parser("repairs", help="per cause and repair: returned, held 7 d, failed again 7 d, held rate")
    repairs.add_argument("--cluster", help="only this cluster's nodes")
    _window(repairs, 30 * 24 * 60, "30 days")
    hold = sub.add_parser("hold", help="hold a node: gpuscope neither drains nor resumes it")
    release = sub.add_parser("release", help="lift a hold")
    for p in (hold, release):
        p.add_argument("node", help="the node's name")
        p.add_argument("--cluster", help="its cluster (default: the one cluster that has a node of this name)")
    hold.add_argument("--by", required=True, help="who holds it (shown with the node)")
    hold.add_argument("--reason", default="", help="why")
    for p in (status, history, episodes, episode, repairs, hold, release):
        p.add_argument("--collector", metavar="URL", default=DEFAULT_COLLECTOR, help=f"(default {DEFAULT_COLLECTOR})")
        p.add_argument("--token-file", type=Path, help="read token, or admin token for hold and release")
        p.add_argument("--json", action="store_true", help="print the API's JSON")
        p.set_defaults(run=_run)


def _window(parser: argparse.ArgumentParser, default_minutes: int, words: str) -> None:
    """How far back (--minutes, in minutes) or which span (--range), for history, episodes and repairs."""
    window = parser.add_mutually_exclusive_group()
    window.add_argument("--minutes", type=_minutes, default=default_minutes, help=f"how far back (default: {words})")
    window.add_argument("--range", type=_range, help=f"as in the UI: {', '.join(PRESETS_S)}, or FROM..TO in UTC")


def _episode_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an episode's number, got {text!r}") from None
    if not 1 <= value <= MAX_EPISODE_ID:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_EPISODE_ID}, got {value}")
    return value


def _range(text: str) -> str:
    # Imported here: the query package needs psycopg, which a GPU node's install (the exporter, this same
    # command) does not have. tests/test_packaging.py runs `gpuscope exporter --help` on such an install.
    from gpuscope.collector.query.range_keys import checked_key

    try:
        return checked_key(text, timedelta(minutes=MAX_MINUTES))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _minutes(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of minutes, got {text!r}") from None
    if not 1 <= value <= MAX_MINUTES:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_MINUTES} (800 days), got {value}")
    return value


def _run(args: argparse.Namespace) -> int:
    base = args.collector.rstrip("/") + "/api/v1/health"
    with collector_client(args.collector, args.token_file, timeout_s=30) as client:
        if args.health_command in ("hold", "release") and args.cluster is None:
            found = client.get(f"{base}/nodes", params={"node": args.node})
            if refused(found):
                return 1
            args.cluster = _only_cluster(args.node, found.json())
        answers = _ask(client, base, args)
    if any(refused(r) for r in answers):
        return 1
    bodies = [r.json() for r in answers]
    if args.health_command == "status" and args.state == HELD:
        bodies[0] = [n for n in bodies[0] if n["held_by"]]
    if args.json:
        print(json.dumps(bodies[0] if len(bodies) == 1 else {"transitions": bodies[0], "actions": bodies[1]}, indent=2))
    else:
        print(_words(args, bodies))
    return 0


def _only_cluster(node: str, nodes: list[dict[str, Any]]) -> str:
    """The cluster of the one node of this name; an error in words where none or several have it."""
    clusters = sorted({n["cluster"] for n in nodes if n["node"] == node})
    if not clusters:
        raise ValueError(f"no node {node!r} in any cluster the collector knows")
    if len(clusters) > 1:
        raise ValueError(f"node {node!r} is in clusters {', '.join(clusters)}: say which with --cluster")
    return clusters[0]


def _ask(client: Any, base: str, args: argparse.Namespace) -> list[Any]:
    if args.health_command == "status":
        state = None if args.state == HELD else args.state
        params = {k: v for k, v in (("cluster", args.cluster), ("state", state)) if v}
        return [client.get(f"{base}/nodes", params=params)]
    if args.health_command == "history":
        span: dict[str, Any] = {"range": args.range} if args.range else {"minutes": args.minutes}
        return [client.get(f"{base}/transitions", params=span), client.get(f"{base}/actions", params=span)]
    if args.health_command in ("episodes", "repairs"):
        span = {"range": args.range} if args.range else {"minutes": args.minutes}
        wanted = {name: getattr(args, name, None) for name in ("cluster", "node", "gpu")}
        return [client.get(f"{base}/{args.health_command}", params=span | {k: v for k, v in wanted.items() if v})]
    if args.health_command == "episode":
        return [client.get(f"{base}/episodes/{args.episode_id}")]
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
        counts[HELD] = sum(1 for node in bodies[0] if node["held_by"])
        lines = ["  ".join(f"{state}: {counts.get(state, 0)}" for state in (*STATES, HELD))]
        for node in nodes:
            held = f"  [held: {node['held_by']}]" if node["held_by"] else ""
            would = "  [dry run: would drain, nothing drained]" if node.get("would_drain") else ""
            since = node["since"] or "-"
            lines.append(f"{node['cluster']}/{node['node']}  {node['state']} since {since}{held}{would}")
            if node["reason"]:
                lines.append(f"    {node['reason']}")
            lines += [f"    {e['at']}  {e['severity']:<9} {e['detail']}" for e in node["evidence"][:5]]
        return "\n".join(lines)
    if args.health_command == "history":
        return _history(f"range {args.range}" if args.range else f"the last {args.minutes} min", bodies[0], bodies[1])
    if args.health_command == "episodes":
        return episodes_words(_span_words(args), bodies[0])
    if args.health_command == "episode":
        return episode_words(bodies[0])
    if args.health_command == "repairs":
        return repairs_words(_span_words(args), bodies[0])
    body = bodies[0]
    return f"{body['cluster']}/{body['node']}: " + (f"held by {body['held_by']}" if body["held_by"] else "hold lifted")


def _span_words(args: argparse.Namespace) -> str:
    return f"range {args.range}" if args.range else f"the last {args.minutes} min"


def _history(window: str, transitions: list[dict[str, Any]], actions: list[dict[str, Any]]) -> str:
    """The two parts of the audit trail, each under a heading that says what it is."""
    if not transitions and not actions:
        return f"nothing happened in {window}"
    lines = [f"Transitions (state changes), newest first: {len(transitions)}"]
    lines += [f"  {t['at']}  {t['cluster']}/{t['node']}  {t['from']} -> {t['to']}  ({t['actor']}): {t['reason']}"
              for t in transitions] or ["  none"]  # fmt: skip
    lines.append(f"Scheduler actions (drains, resumes, validations, refusals, holds), newest first: {len(actions)}")
    lines += [f"  {a['at']}  {a['cluster']}/{a['node']}  {a['action']}"
              f"{' (dry run: not run)' if a['dry_run'] else ''}: {a['detail']}"
              for a in actions] or ["  none"]  # fmt: skip
    return "\n".join(lines)
