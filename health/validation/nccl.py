"""The nccl_all_reduce preset: NCCL's `all_reduce_perf` (nccl-tests) over the node's GPUs, 8 B to 8 GB
doubling, as NCCL's README runs it, and its verdict.

The output (nccl-tests common.cu): "#" lines (parameters, devices, the column headings `size count type
redop root time algbw busbw #wrong time algbw busbw #wrong`, out-of-place then in-place), one row per
size, then `# Out of bounds values : 0 OK` and `# Avg bus bandwidth    : 70.742`. The node fails on wrong
results in any row, out-of-bounds values, an average bus bandwidth under the site's threshold, a missing
average line (the run did not finish) or an exit status other than 0."""

from __future__ import annotations

import re

from gpuscope.health.validation.config import ValidationConfig
from gpuscope.health.validation.outcome import Verdict

_AVERAGE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<gbps>[0-9.eE+-]+)", re.MULTILINE)
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<count>\d+)", re.MULTILINE)
# The #wrong columns of the standard layout, counted from the row's end, where no heading says otherwise.
_WRONG_FROM_END = (-5, -1)


def nccl_argv(config: ValidationConfig, node: str) -> list[str]:
    command = [config.all_reduce_perf, "-b", "8", "-e", "8G", "-f", "2", "-g", str(config.gpus)]
    return [part.replace("{node}", node) for part in (*config.launcher, *command)]


def judge_all_reduce(output: str, returncode: int, min_busbw_gbps: float) -> Verdict:
    wrong = wrong_result_sizes(output)
    if wrong:
        shown = ", ".join(f"{size} B" for size in wrong[:3]) + (f" and {len(wrong) - 3} more" if len(wrong) > 3 else "")
        return Verdict(f"wrong results at size {wrong[0]} B", f"all_reduce_perf found wrong results at size {shown}")
    bounds = _OUT_OF_BOUNDS.search(output)
    if bounds and int(bounds["count"]):
        return Verdict("out of bounds values", f"all_reduce_perf: {bounds['count']} out of bounds values")
    average = _AVERAGE.search(output)
    if average is None:
        ended = f" (exit {returncode})" if returncode else ""
        return Verdict("no average bus bandwidth", f"no 'Avg bus bandwidth' line: the run did not finish{ended}")
    gbps = float(average["gbps"])
    if gbps < min_busbw_gbps:
        return Verdict(
            f"bus bandwidth {gbps:.1f} GB/s < {min_busbw_gbps:g} GB/s",
            f"bus bandwidth {gbps:.1f} GB/s below the site's {min_busbw_gbps:g} GB/s",
        )
    if returncode:
        why = f"bus bandwidth {gbps:.1f} GB/s, yet it exited with status {returncode}"
        return Verdict(f"all_reduce_perf exit {returncode}", why)
    return Verdict(None, f"bus bandwidth {gbps:.1f} GB/s")


def wrong_result_sizes(output: str) -> list[int]:
    """The sizes (bytes) whose out-of-place or in-place result had wrong values ("N/A": not checked)."""
    columns: tuple[int, ...] = _WRONG_FROM_END
    sizes = []
    for line in output.splitlines():
        fields = line.split()
        if line.startswith("#") and "#wrong" in fields and "size" in fields[:2]:
            heading = fields[1:] if fields[0] == "#" else [fields[0].lstrip("#"), *fields[1:]]
            columns = tuple(i - len(heading) for i, name in enumerate(heading) if name == "#wrong")
            continue
        if line.startswith("#") or len(fields) < 2 or not (fields[0].isdigit() and fields[1].isdigit()):
            continue
        counts = [fields[i] for i in columns if -len(fields) <= i]
        if any(count.isdigit() and int(count) > 0 for count in counts):
            sizes.append(int(fields[0]))
    return sizes
