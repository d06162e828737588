"""What Prometheus must answer, computed from the telemetry itself, and the comparison with what it did.

Windows follow Prometheus 2.x: a range `[d]` evaluated at t holds the samples with t - d <= stamp <= t
(both ends; 3.0 leaves the start out), and an instant selector takes the latest sample at most 5 minutes
old. A check returns its problems, empty when the answer is right: right series, right points, every
value equal to the telemetry's (scaled as the exporter scales) to 1e-9.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gpuscope.bench.prometheus_series import exposed
from gpuscope.bench.telemetry import JobSpan, Telemetry

RTOL = 1e-9
CHUNK_STEPS = 720  # telemetry computed two hours at a time, so a day of it never sits in memory at once
MAX_PROBLEMS = 5  # a wrong answer is usually wrong everywhere: the first few say enough


def window_means(telemetry: Telemetry, key: str, windows: np.ndarray, gpus: Sequence[int] | None = None) -> np.ndarray:
    """(windows, gpus): mean of each GPU's scaled samples with lo <= stamp <= hi for each [lo, hi] row of
    `windows`; NaN where a window holds none (or is NaN)."""
    columns = list(range(len(telemetry.gpus))) if gpus is None else list(gpus)
    steps = (np.nan_to_num(windows, nan=telemetry.start - 1) - telemetry.start) / telemetry.step_s
    first = np.clip(np.ceil(steps[:, 0]), 0, telemetry.steps).astype(int)
    end = np.maximum(first, np.clip(np.floor(steps[:, 1]) + 1, 0, telemetry.steps).astype(int))
    sums = np.zeros((len(windows), len(columns)))
    scale = exposed(key).scale
    lo, hi = int(first.min(initial=0)), int(end.max(initial=0))
    for chunk_lo in range(lo, hi, CHUNK_STEPS):
        chunk_hi = min(chunk_lo + CHUNK_STEPS, hi)
        values = telemetry.block(chunk_lo, chunk_hi)[key][:, columns] * scale
        for i in np.flatnonzero((first < chunk_hi) & (end > chunk_lo)):
            sums[i] += values[max(first[i], chunk_lo) - chunk_lo : min(end[i], chunk_hi) - chunk_lo].sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / (end - first)[:, None]


def latest_before(evaluations: np.ndarray, times: np.ndarray, lookback_s: float = 300.0) -> np.ndarray:
    """For each time, the latest evaluation at or before it within the lookback (NaN: none)."""
    index = np.searchsorted(evaluations, times, side="right") - 1
    found = np.where(index >= 0, evaluations[np.maximum(index, 0)], np.nan)
    return np.where(times - found <= lookback_s, found, np.nan)


def rack_sums(telemetry: Telemetry, per_gpu: np.ndarray) -> tuple[list[tuple[str, str]], np.ndarray]:
    """Per-GPU columns summed per (cluster, rack): the racks and a (rows, racks) array."""
    racks = sorted({(gpu.cluster, gpu.rack) for gpu in telemetry.gpus})
    position = {rack: i for i, rack in enumerate(racks)}
    member = np.zeros((len(telemetry.gpus), len(racks)))
    for i, gpu in enumerate(telemetry.gpus):
        member[i, position[(gpu.cluster, gpu.rack)]] = 1.0
    return racks, per_gpu @ member  # NaN stays NaN: a rack with a GPU missing a window has no value


def compare(
    result: list[dict[str, Any]],
    identity: Callable[[dict[str, str]], Any],
    expected: dict[Any, np.ndarray],
    times: np.ndarray,
) -> list[str]:
    """A range answer against `expected` (identity -> values at `times`, NaN where no point is due)."""
    problems = []
    got = {identity(series["metric"]): series["values"] for series in result}
    if len(got) != len(result):
        problems.append(f"{len(result)} series for {len(got)} GPUs or racks: some twice")
    due = {key for key, values in expected.items() if not np.isnan(values).all()}
    if set(got) != due:
        missing, extra = sorted(due - set(got))[:3], sorted(set(got) - due)[:3]
        problems.append(f"{len(got)} series, {len(due)} due (missing e.g. {missing}, unexpected e.g. {extra})")
    for key in sorted(due & set(got)):
        stamps = np.array([float(stamp) for stamp, _ in got[key]])
        values = np.array([float(value) for _, value in got[key]])
        present = ~np.isnan(expected[key])
        if not np.array_equal(stamps, np.round(times[present], 3)):
            problems.append(f"{key}: {len(stamps)} points, {int(present.sum())} due")
        elif not np.allclose(values, expected[key][present], rtol=RTOL, atol=0):
            worst = int(np.argmax(np.abs(values - expected[key][present])))
            problems.append(
                f"{key} at {stamps[worst]}: {float(values[worst])!r}, expected {float(expected[key][present][worst])!r}"
            )
        if len(problems) >= MAX_PROBLEMS:
            break
    return problems


def per_gpu(telemetry: Telemetry, values: np.ndarray, gpus: Sequence[int] | None = None) -> dict[Any, np.ndarray]:
    """(times, gpus) columns keyed by the GPU's uuid."""
    positions = range(len(telemetry.gpus)) if gpus is None else gpus
    return {telemetry.gpus[p].uuid: values[:, i] for i, p in enumerate(positions)}


def by_uuid(metric: dict[str, str]) -> Any:
    return metric.get("uuid")


def by_rack(metric: dict[str, str]) -> Any:
    return (metric.get("cluster"), metric.get("rack"))


def job_held(telemetry: Telemetry, job: JobSpan, windows: np.ndarray) -> np.ndarray:
    """Whether the job held its GPUs at some sample inside each window."""
    first = telemetry.start + job.first_step * telemetry.step_s
    last = telemetry.start + (job.end_step - 1) * telemetry.step_s
    earliest = np.ceil((np.maximum(windows[:, 0], first) - first) / telemetry.step_s) * telemetry.step_s + first
    return earliest <= np.minimum(windows[:, 1], last)


def check_hottest(telemetry: Telemetry, result: list[dict[str, Any]], count: int) -> list[str]:
    temps = telemetry.block(telemetry.steps - 1, telemetry.steps)["temp_c"][0] * exposed("temp_c").scale
    uuids = {gpu.uuid: i for i, gpu in enumerate(telemetry.gpus)}
    got = [(series["metric"].get("uuid", ""), float(series["value"][1])) for series in result]
    problems = []
    if sorted((value for _, value in got), reverse=True) != sorted(temps.tolist(), reverse=True)[:count]:
        problems.append(f"values {sorted(v for _, v in got)} are not the {count} highest")
    wrong = [(uuid, value) for uuid, value in got if uuid not in uuids or temps[uuids[uuid]] != value]
    if wrong:
        problems.append(f"GPUs whose temperature is not theirs: {wrong[:3]}")
    return problems
