"""A node's return to service waits for the site's check: the policy's validate_command ("{node}" replaced),
or a preset (health/validation/) that runs `dcgmi diag -r 2|3` or NCCL's `all_reduce_perf` and reads its
output into a verdict naming the failed test. Run without a shell, within its time limit."""

from __future__ import annotations

import signal

from gpuscope.health.commands import Ran, run_command
from gpuscope.health.policy import HealthPolicy
from gpuscope.health.validation.config import ValidationConfig
from gpuscope.health.validation.dcgm_diag import dcgm_argv, judge_dcgm
from gpuscope.health.validation.nccl import judge_all_reduce, nccl_argv
from gpuscope.health.validation.outcome import ValidationOutcome, Verdict


async def run_validation(policy: HealthPolicy, node: str, gpu: int | None = None) -> ValidationOutcome:
    """The check of `node`, or of its one GPU `gpu` where only that GPU is out of service (its others run
    jobs): dcgmi's `-i`, and "{gpu}" in validate_command ("all" for the whole node)."""
    preset = policy.validation or ValidationConfig(preset="command")
    if preset.preset == "command" and not policy.validate_command:
        return ValidationOutcome(True, "checks passed; no validation command configured")
    if preset.preset == "dcgm_diag":
        argv = dcgm_argv(preset, node, gpu)
    elif preset.preset == "nccl_all_reduce":
        argv = nccl_argv(preset, node)
    else:
        which = "all" if gpu is None else str(gpu)
        argv = [
            part.replace("{node}", node).replace("{gpu}", which)
            for part in (*preset.launcher, *policy.validate_command)
        ]
    shown = " ".join(argv)
    timeout_s = preset.timeout_s or policy.validate_timeout_s
    ran = await run_command(argv, timeout_s)
    if ran.trouble:
        timed_out = ran.trouble.startswith("no result")
        failed = f"timeout after {timeout_s:g} s" if timed_out else f"cannot run {argv[0]}"
        return ValidationOutcome(False, f"{shown}: {ran.trouble}", failed)
    assert ran.returncode is not None  # it ran, since there was no trouble
    if ran.returncode < 0:  # a signal ended it: killed (out of memory, an operator), not a verdict
        killed = f"killed by {_signal_name(-ran.returncode)}"
        return ValidationOutcome(False, f"{shown}: {killed}" + ran.tail(), killed)
    if preset.preset == "command":
        verdict = "passed" if ran.ok else f"failed (exit {ran.returncode})"
        exited = None if ran.ok else f"exit {ran.returncode}"
        return ValidationOutcome(ran.ok, f"{shown}: {verdict}" + ran.tail(), exited)
    judged = _judged(preset, ran)
    said = f"passed: {judged.why}" if judged.ok else f"failed: {judged.failed_test}: {judged.why}"
    return ValidationOutcome(judged.ok, f"{shown}: {said}", judged.failed_test)


def _judged(preset: ValidationConfig, ran: Ran) -> Verdict:
    assert ran.returncode is not None
    if preset.preset == "dcgm_diag":
        return judge_dcgm(ran.output, ran.returncode)
    assert preset.min_busbw_gbps is not None  # the config requires it for this preset
    return judge_all_reduce(ran.output, ran.returncode, preset.min_busbw_gbps)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
