"""Rules for a block of sample rows once it is arrays, whichever wire format it came in: timestamps
in the window, devices listed, no (device, ts) twice, job references valid, every metric value in its
range. Vectorised: no Python loop per row or value. Rules are listed in docs/ingest-format.md."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpuscope.collector.ingest.batch import (
    MAX_DEVICES,
    MAX_FUTURE_SECONDS,
    MAX_JOB_RUNS,
    MAX_ROWS,
    MIN_TIMESTAMP,
    TIME_RULE,
    IngestError,
    Loc,
)
from gpuscope.collector.store.batch import Samples
from gpuscope.collector.store.columns import NULL_INT, Column


def check_rows(rows: int, loc: Loc) -> None:
    if rows > MAX_ROWS:
        raise IngestError(413, (*loc, "ts"), f"at most {MAX_ROWS} rows per batch")


def samples(
    loc: Loc,
    device_key: str,
    ts: np.ndarray,
    device: np.ndarray,
    listed: Sequence[int],
    window: tuple[float, float],
    values: tuple[Sequence[Column], np.ndarray],
    up: np.ndarray | None = None,
    job: np.ndarray | None = None,
    job_count: int = 0,
    exact: ExactInts | None = None,
) -> Samples:
    """`device`: float or int per row, each must be in `listed`; `values`: the columns present and a
    (columns x rows) float64 matrix, NaN where not reported; `job`: positions in the batch's jobs
    (0 to job_count-1) or -1; `exact`: integers a double cannot hold, by (column, row)."""
    check_rows(len(ts), loc)
    present, matrix = values
    if not len(ts):  # a node without InfiniBand sends an empty port block in every batch: no rule to check
        return Samples(ts=ts, device=device.astype(np.int64), values=_empty_values(present), up=up, job=job)
    oldest, now = window
    _check_range(ts, (*loc, "ts"), max(oldest, MIN_TIMESTAMP), now + MAX_FUTURE_SECONDS, TIME_RULE)
    unknown = _unlisted(device, listed)
    if unknown is not None:
        i = int(np.argmax(unknown))
        raise IngestError(422, (*loc, device_key, i), f"{device[i]:g} is not a {device_key} listed in this batch")
    device = device.astype(np.int64)
    # (ts to the microsecond, device) as one integer: a 1-D sort finds repeats far faster than unique(axis=1).
    keys = np.sort(np.rint(ts * 1e6).astype(np.int64) * MAX_DEVICES + device)
    repeats = int(np.count_nonzero(keys[1:] == keys[:-1]))
    if repeats:
        raise IngestError(422, loc, f"{repeats} duplicate ({device_key}, ts) pairs")
    if job is not None:
        bad = (job < -1) | (job >= job_count)
        if bad.any():
            i = int(np.argmax(bad))
            raise IngestError(
                422, (*loc, "job", i), f"must be null or -1 (no job) or a position in jobs (0-{job_count - 1})"
            )
        job = job.astype(np.int64)
        check_job_runs(ts, device, job, loc)
    return Samples(
        ts=ts, device=device, values=_metric_values(present, matrix, (*loc, "values"), exact), up=up, job=job
    )


def _empty_values(present: Sequence[Column]) -> dict[str, np.ndarray]:
    return {c.key: np.empty(0, dtype=np.int64 if c.integer else np.float64) for c in present}


def _unlisted(device: np.ndarray, listed: Sequence[int]) -> np.ndarray | None:
    """Rows whose device is not in `listed`, or None when all are (the common case, made cheap: a
    node lists its devices 0..n-1, so a min and a max decide)."""
    if not device.size:
        return None
    lowest, highest = device.min(), device.max()
    integral = device.dtype.kind in "iu" or bool((device == np.floor(device)).all())
    if integral and lowest >= 0 and highest < len(listed) and list(listed) == list(range(len(listed))):
        return None
    known = np.zeros(MAX_DEVICES, dtype=bool)
    known[list(listed)] = True
    whole = (device >= 0) & (device < MAX_DEVICES) & (device == np.floor(device))
    unknown = ~whole | ~known[np.where(whole, device, 0).astype(np.int64)]
    return unknown if unknown.any() else None


# Integers a JSON parser reads exactly, keyed by (column position in `present`, row): version 1 sends
# counters as JSON integers, and a double cannot hold one above 2^53 (2^63-1 becomes 2^63).
ExactInts = dict[tuple[int, int], int]

# Per list of columns: their bounds as doubles (the exact bounds rounded inwards; columns x 2 x 1) and
# the positions of the integer columns. Batches from one kind of node carry the same list every time;
# bounded, as a sender chooses its lists (any subset, in any order, of the known keys).
_bounds: dict[tuple[str, ...], tuple[np.ndarray, list[int]]] = {}
MAX_BOUND_LISTS = 256


def _bounds_of(present: Sequence[Column]) -> tuple[np.ndarray, list[int]]:
    keys = tuple(c.key for c in present)
    found = _bounds.get(keys)
    if found is None:
        if len(_bounds) >= MAX_BOUND_LISTS:
            _bounds.clear()
        bounds = np.array([c.float_bounds for c in present]).reshape(len(present), 2, 1)
        found = _bounds[keys] = (bounds, [i for i, c in enumerate(present) if c.integer])
    return found


def _metric_values(
    present: Sequence[Column], matrix: np.ndarray, loc: Loc, exact: ExactInts | None = None
) -> dict[str, np.ndarray]:
    """All metric columns checked at once: one range comparison over the 2-D array. Per-column work
    happens only to name a column at fault. Integer columns become int64 (NULL_INT: not reported).

    A double is in range when it lies within its column's bounds as doubles; an exact integer (from
    `exact`) when it lies within the exact bounds: integers are compared as integers."""
    if not present:
        return {}
    bounds, integer_rows = _bounds_of(present)
    # NaN compares False (not reported is allowed); every column's bounds are finite, so an infinity
    # falls outside them too (tests/collector test this for every column).
    bad = (matrix < bounds[:, 0]) | (matrix > bounds[:, 1])
    exact = exact or {}
    for (i, row), value in exact.items():
        bad[i, row] = not present[i].low <= value <= present[i].high
    if bad.any():
        i, row = (int(x) for x in np.argwhere(bad)[0])
        column = present[i]
        shown = exact.get((i, row))
        value = matrix[i, row]
        if shown is None and np.isinf(value):
            raise IngestError(422, (*loc, column.key, row), "out of range (overflows a double)")
        raise IngestError(
            422,
            (*loc, column.key, row),
            f"{shown if shown is not None else format(value, 'g')} is out of range: expected between"
            f" {_bound(column.low)} and {_bound(column.high)}",
        )
    out = dict(zip((c.key for c in present), matrix, strict=True))
    if integer_rows:
        integers = _to_int64(matrix, integer_rows, exact)
        out.update((present[i].key, values) for i, values in zip(integer_rows, integers, strict=True))
    return out


def _to_int64(matrix: np.ndarray, rows: list[int], exact: ExactInts) -> np.ndarray:
    """The integer columns `rows` of `matrix`, rounded (every value is in range: checked), NULL_INT where
    not reported, with the exact integers in place of their doubles."""
    values = matrix[rows]  # a copy: the matrix may be a read-only view of the request body
    missing = np.isnan(values)
    values[missing] = 0
    position = {row: n for n, row in enumerate(rows)}
    for i, row in exact:
        values[position[i], row] = 0  # its double may be 2^63 (the nearest to 2^63-1): no int64 holds that
    out = np.rint(values).astype(np.int64)
    out[missing] = NULL_INT
    for (i, row), value in exact.items():
        out[position[i], row] = value
    return out


def _bound(value: float | int) -> str:
    return str(value) if type(value) is int else f"{value:g}"


def check_job_runs(ts: np.ndarray, device: np.ndarray, job: np.ndarray, loc: Loc) -> None:
    """Each GPU's rows in time order form runs of the same `job`: at most MAX_JOB_RUNS per GPU in a
    batch, so the allocation work a batch asks for (store/allocations.py) stays bounded."""
    if len(job) <= MAX_JOB_RUNS:
        return
    order = np.lexsort((ts, device))
    dev, jobs = device[order], job[order]
    starts = np.r_[True, (dev[1:] != dev[:-1]) | (jobs[1:] != jobs[:-1])]
    run_index = np.cumsum(starts)  # 1-based run number, over all GPUs
    first_run_of_gpu = np.maximum.accumulate(np.where(np.r_[True, dev[1:] != dev[:-1]], run_index, 0))
    nth = run_index - first_run_of_gpu + 1  # the run's number within its GPU
    if nth.max() > MAX_JOB_RUNS:
        row = int(order[int(np.argmax(nth > MAX_JOB_RUNS))])
        raise IngestError(
            422,
            (*loc, "job", row),
            f"GPU {int(device[row])} changes job too often: at most {MAX_JOB_RUNS} runs of one job (or of none)"
            " per GPU in a batch",
        )


def _check_range(array: np.ndarray, loc: Loc, low: float, high: float, expected: str) -> None:
    bad = ~((array >= low) & (array <= high))  # NaN fails too
    if bad.any():
        i = int(np.argmax(bad))
        raise IngestError(422, (*loc, i), f"{array[i]:g} is out of range: expected {expected}")
