"""Rules for a block of sample rows once it is arrays, whichever wire format it came in: timestamps
in the window, devices listed, no (device, ts) twice, job references valid, every metric value in its
range. Vectorised: no Python loop per row or value. Rules are listed in docs/ingest-format.md."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpuscope.collector.ingest.batch import (
    MAX_DEVICES,
    MAX_FUTURE_SECONDS,
    MAX_ROWS,
    MIN_TIMESTAMP,
    TIME_RULE,
    IngestError,
    Loc,
)
from gpuscope.collector.store.batch import Samples
from gpuscope.collector.store.columns import Column


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
) -> Samples:
    """`device`: float or int per row, each must be in `listed`; `values`: the columns present and a
    (columns x rows) float64 matrix, NaN where not reported; `job`: positions in the batch's jobs
    (0 to job_count-1) or -1."""
    check_rows(len(ts), loc)
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
            raise IngestError(422, (*loc, "job", i), f"must be null or a position in jobs (0-{job_count - 1})")
        job = job.astype(np.int64)
    present, matrix = values
    return Samples(ts=ts, device=device, values=_metric_values(present, matrix, (*loc, "values")), up=up, job=job)


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


_bounds: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray, list[int]]] = {}


def _bounds_of(present: Sequence[Column]) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Per-row low and high bounds and the rows stored as integers, for a list of columns. Batches
    from one kind of node carry the same list every time: kept by their keys (a handful of lists)."""
    keys = tuple(c.key for c in present)
    found = _bounds.get(keys)
    if found is None:
        low = np.array([[c.low] for c in present])
        high = np.array([[c.high] for c in present])
        found = _bounds[keys] = (low, high, [i for i, c in enumerate(present) if c.integer])
    return found


def _metric_values(present: Sequence[Column], matrix: np.ndarray, loc: Loc) -> dict[str, np.ndarray]:
    """All metric columns checked at once: one range comparison over the 2-D array. Per-column work
    happens only to name a column at fault."""
    if not present:
        return {}
    low, high, integer_rows = _bounds_of(present)
    bad = np.isinf(matrix) | (matrix < low) | (matrix > high)  # comparisons with NaN are False, silently
    if bad.any():
        i, row = (int(x) for x in np.argwhere(bad)[0])
        column = present[i]
        value = matrix[i, row]
        if np.isinf(value):
            raise IngestError(422, (*loc, column.key, row), "out of range (overflows a double)")
        raise IngestError(
            422,
            (*loc, column.key, row),
            f"{value:g} is out of range: expected between {column.low:g} and {column.high:g}",
        )
    if integer_rows:
        matrix = matrix.copy()  # it may be a read-only view of the request body
        matrix[integer_rows] = np.rint(matrix[integer_rows])
    return dict(zip((c.key for c in present), matrix, strict=True))


def _check_range(array: np.ndarray, loc: Loc, low: float, high: float, expected: str) -> None:
    bad = ~((array >= low) & (array <= high))  # NaN fails too
    if bad.any():
        i = int(np.argmax(bad))
        raise IngestError(422, (*loc, i), f"{array[i]:g} is out of range: expected {expected}")
