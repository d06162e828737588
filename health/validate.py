"""A node's return to service waits for the site's own check (an NCCL test, `dcgmi diag -r 2`, ...):
the policy's validate_command with "{node}" replaced, run without a shell, within its time limit."""

from __future__ import annotations

from gpuscope.health.commands import run_command
from gpuscope.health.policy import HealthPolicy
from gpuscope.health.schedulers.base import Outcome

OUTPUT_TAIL = 400  # characters of the command's output kept with its outcome


async def run_validation(policy: HealthPolicy, node: str) -> Outcome:
    if not policy.validate_command:
        return Outcome(True, "checks passed; no validation command configured")
    argv = [part.replace("{node}", node) for part in policy.validate_command]
    shown = " ".join(argv)
    ran = await run_command(argv, policy.validate_timeout_s)
    if ran.trouble:
        return Outcome(False, f"{shown}: {ran.trouble}")
    tail = ran.output[-OUTPUT_TAIL:]
    verdict = "passed" if ran.ok else f"failed (exit {ran.returncode})"
    return Outcome(ran.ok, f"{shown}: {verdict}" + (f": {tail}" if tail else ""))
