"""The dcgm_diag preset: `dcgmi diag -r 2|3 -j` for a node, and its verdict. Any failed test, or an exit
status other than 0, fails the node; the failure names the tests and the GPUs (from DCGM's results, or
from the "GPU N" its warnings begin with when a row says "Fail - All")."""

from __future__ import annotations

import re

from gpuscope.health.validation.config import ValidationConfig
from gpuscope.health.validation.dcgm_output import TestResult, read_diag_output
from gpuscope.health.validation.outcome import Verdict

_GPU_IN_WARNING = re.compile(r"\bGPU (\d+)\b")
WHY_LENGTH = 300  # characters of DCGM's warnings kept in the verdict


def dcgm_argv(config: ValidationConfig, node: str, gpu: int | None = None) -> list[str]:
    """`gpu`: the one GPU to check (`-i`), where the node's others stay in service; None: every GPU."""
    host = config.host or ("{node}" if not config.launcher else None)
    command = [config.dcgmi, "diag", "-r", str(config.level), "-j", *(["-i", str(gpu)] if gpu is not None else [])]
    if host is not None:
        command += ["--host", host]
    return [part.replace("{node}", node) for part in (*config.launcher, *command)]


def judge_dcgm(output: str, returncode: int) -> Verdict:
    report = read_diag_output(output)
    if report is None:
        return Verdict(f"dcgmi exit {returncode}" if returncode else "no diagnostic results", "output not understood")
    if report.error:
        return Verdict("diagnostic not run", report.error[:WHY_LENGTH])
    failed = [result for result in report.results if result.failed]
    if failed:
        tests = dict.fromkeys(result.test for result in failed)
        names = [_named(test, [result for result in failed if result.test == test]) for test in tests]
        warnings = dict.fromkeys(warning for result in failed for warning in result.warnings)
        return Verdict("; ".join(names), " ".join(warnings)[:WHY_LENGTH])
    if returncode:
        return Verdict(f"dcgmi exit {returncode}", "no test failed, yet dcgmi exited with an error")
    if not report.results:
        return Verdict("no diagnostic results", "dcgmi reported no test")
    return Verdict(None, f"{len(dict.fromkeys(result.test for result in report.results))} tests, none failed")


def _named(test: str, failed: list[TestResult]) -> str:
    """ "GPU Memory (GPU 3)": the test and the GPUs it failed on, where the output says."""
    gpus = dict.fromkeys(gpu for result in failed for gpu in result.gpus)
    if not gpus:  # "Fail - All": the warnings say which GPUs
        gpus = dict.fromkeys(g for result in failed for w in result.warnings for g in _GPU_IN_WARNING.findall(w))
    if not gpus:
        return test
    return f"{test} (GPU{'s' if len(gpus) > 1 else ''} {', '.join(gpus)})"
