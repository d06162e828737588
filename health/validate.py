"""A node's return to service waits for the site's own check (an NCCL test, `dcgmi diag -r 2`, ...):
the policy's validate_command with "{node}" replaced, run without a shell, within its time limit."""

from __future__ import annotations

import asyncio

from gpuscope.health.policy import HealthPolicy
from gpuscope.health.schedulers.base import Outcome

OUTPUT_TAIL = 400  # characters of the command's output kept with its outcome


async def run_validation(policy: HealthPolicy, node: str) -> Outcome:
    if not policy.validate_command:
        return Outcome(True, "checks passed; no validation command configured")
    argv = [part.replace("{node}", node) for part in policy.validate_command]
    shown = " ".join(argv)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
    except OSError as exc:
        return Outcome(False, f"{shown}: cannot run: {exc.strerror or exc}")
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), policy.validate_timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return Outcome(False, f"{shown}: no result in {policy.validate_timeout_s:.0f} s")
    tail = out.decode(errors="replace").strip()[-OUTPUT_TAIL:]
    verdict = "passed" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
    return Outcome(proc.returncode == 0, f"{shown}: {verdict}" + (f": {tail}" if tail else ""))
