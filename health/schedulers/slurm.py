"""Slurm through its own client: `scontrol update nodename=N state=drain reason="gpuscope: ..."` to drain,
`state=resume` to resume, `scontrol show node -o` to read every node's state and reason in one call.

Slurm reads a node list as a hostlist ("gpu[01-64]" is 64 nodes, "a,b" two), so a name gpuscope got
from an exporter is used only if it is one plain host name: a hostile or odd name must not drain the
fleet. Commands run without a shell, with a time limit."""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpuscope.health.commands import run_command
from gpuscope.health.schedulers.base import Outcome, SchedulerNode

PLAIN_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
STATE = re.compile(r"(?:^|\s)State=(\S+)")
NAME = re.compile(r"^NodeName=(\S+)")
REASON_STAMP = re.compile(r"\s*\[[^\]]*@[^\]]*\]\s*$")  # " [root@2026-11-24T21:00:00]" after the reason
TIMEOUT_S = 30.0
REASON_MAX = 200  # Slurm keeps long reasons, but sinfo and chat messages are read by people


class SlurmScheduler:
    name = "slurm"

    def __init__(self, scontrol: str = "scontrol", timeout_s: float = TIMEOUT_S) -> None:
        self._scontrol = scontrol
        self._timeout_s = timeout_s

    def command(self, action: str, node: str, reason: str = "") -> str:
        argv = self._argv(action, node, reason)
        return " ".join(f'"{a}"' if " " in a else a for a in argv)

    async def drain(self, node: str, reason: str) -> Outcome:
        return await self._update("drain", node, reason)

    async def resume(self, node: str) -> Outcome:
        return await self._update("resume", node)

    async def nodes(self, names: Iterable[str]) -> dict[str, SchedulerNode]:
        wanted = set(names)
        if not wanted:
            return {}
        ok, out = await self._run([self._scontrol, "show", "node", "-o"])
        if not ok:
            raise SchedulerUnavailable(out)
        found = {}
        for line in out.splitlines():
            parsed = parse_node_line(line)
            if parsed is not None and parsed[0] in wanted:
                found[parsed[0]] = parsed[1]
        return found

    def _argv(self, action: str, node: str, reason: str = "") -> list[str]:
        argv = [self._scontrol, "update", f"nodename={node}", f"state={action}"]
        if action == "drain":
            argv.append(f"reason={one_line(reason)}")
        return argv

    async def _update(self, action: str, node: str, reason: str = "") -> Outcome:
        if not PLAIN_HOST.match(node):
            return Outcome(False, f"refused: {node!r} is not one plain host name (Slurm would read it as a list)")
        argv = self._argv(action, node, reason)
        ok, out = await self._run(argv)
        return Outcome(ok, f"{self.command(action, node, reason)}: {out or ('done' if ok else 'failed')}")

    async def _run(self, argv: list[str]) -> tuple[bool, str]:
        ran = await run_command(argv, self._timeout_s)
        return ran.ok, f"{argv[0]}: {ran.trouble}" if ran.trouble else ran.output


class SchedulerUnavailable(RuntimeError):
    """The scheduler could not be asked: its client failed or is missing."""


def one_line(reason: str) -> str:
    text = " ".join(reason.split())
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 1] + "…"


def parse_node_line(line: str) -> tuple[str, SchedulerNode] | None:
    """One line of `scontrol show node -o`: the name, and whether it is drained and why. The reason comes
    last and may hold spaces; Slurm appends who set it and when, which is dropped."""
    name = NAME.match(line.strip())
    state = STATE.search(line)
    if name is None or state is None:
        return None
    flags = state.group(1).split("+")
    reason = ""
    if " Reason=" in line:
        reason = REASON_STAMP.sub("", line.split(" Reason=", 1)[1]).strip()
    drained = any(flag.startswith("DRAIN") for flag in flags)  # DRAIN, or DRAINING/DRAINED in older releases
    return name.group(1), SchedulerNode(drained, reason)
