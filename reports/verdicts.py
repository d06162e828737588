"""What a job's report means, in sentences a user acts on (jobstats' "notes"): GPUs held idle, low
utilisation, tensor cores left unused. Read from the report's JSON, so the command line and the digests
say the same thing."""

from __future__ import annotations

from typing import Any

LOW_UTIL_PCT = 50.0  # under this on average, the job would likely run as fast on fewer GPUs
LOW_TENSOR_PCT = 5.0  # under this while busy: the tensor cores are hardly used
IDLE_GPU_HOURS = 0.5  # a GPU counts as "held idle" from half an hour of idle runs


def verdicts(report: dict[str, Any]) -> list[str]:
    gpus = report["per_gpu"]
    found = []
    idle = [g for g in gpus if g["idle_hours"] >= IDLE_GPU_HOURS]
    if idle:
        longest = max(g["idle_hours"] for g in idle)
        found.append(
            f"{len(idle)} of {len(gpus)} GPUs held idle for up to {_hours(longest)}"
            f" ({report['gpu_hours_idle']:.1f} GPU-hours in all, utilisation under 5 % for 30 minutes or more):"
            " release GPUs you do not use, or ask for fewer."
        )
    utils = [(g["util_mean_pct"], g["allocated_hours"]) for g in gpus if g["util_mean_pct"] is not None]
    held = sum(h for _, h in utils)
    if held > 0:
        mean = sum(u * h for u, h in utils) / held
        if mean < LOW_UTIL_PCT:
            found.append(f"GPU utilisation averaged {mean:.0f} %: the job may run as fast on fewer GPUs.")
    tensors = [g["tensor_active_mean_pct"] for g in gpus if g["tensor_active_mean_pct"] is not None]
    busy = [g for g in gpus if (g["util_mean_pct"] or 0) >= LOW_UTIL_PCT]
    if tensors and busy and max(tensors) < LOW_TENSOR_PCT:
        found.append(
            f"Tensor cores were active {max(tensors):.1f} % of the time at most: mixed precision (bf16/fp16)"
            " or TF32 could speed this job up."
        )
    return found


def _hours(hours: float) -> str:
    return f"{hours * 60:.0f} min" if hours < 1 else f"{hours:.1f} h"
