"""A signal the straggler detector follows per element (rank, node, port): what it reads now and what is
normal for it."""

from __future__ import annotations

import math

import numpy as np


class Signal:
    """Per element: `now`, a fast exponentially weighted mean of the values observed, and `base`, the
    median over the last `blocks` means of `block` values learnt each (NaN for missing). Missing values
    leave `now` as it is.

    The normal is a median of block means, not of single values, because `now` is a mean: where one
    sample covers part of a step (1 s samples of a 3.5 s step, say), single values are skewed or
    bimodal and their median sits far from their mean, which would read as a slowdown that is not
    there. Taking the median once a block also keeps the cost down: it is most of the detector's."""

    def __init__(self, fast: float, blocks: int, block: int, spread: bool = False) -> None:
        self.fast, self.blocks, self.block, self.track_spread = fast, blocks, block, spread
        self.now = np.empty(0)
        self.base = np.empty(0)
        self.spread = np.empty(0)  # where tracked: the block means' median absolute deviation / their median
        self._means = BlockMeans(0, blocks, block)

    def observe(self, values: np.ndarray) -> None:
        values = values.astype(float)
        if self.now.size == 0:
            self.now = np.full(values.size, np.nan)
            self.base = np.full(values.size, np.nan)
            self.spread = np.full(values.size, np.nan)
            self._means = BlockMeans(values.size, self.blocks, self.block)
        seen = np.isfinite(values)
        fill_now = ~np.isfinite(self.now) & seen
        self.now[fill_now] = values[fill_now]
        self.now[seen] += self.fast * (values[seen] - self.now[seen])

    def learn(self, values: np.ndarray) -> None:
        """Add values already observed to the normal."""
        seen = np.isfinite(values)
        if not self._means.add(np.where(seen, values, 0.0), seen):
            return
        ring = self._means.ring
        self.base = nanmedian_rows(ring)  # an element never seen: NaN, as it should
        if self.track_spread:
            with np.errstate(all="ignore"):
                self.spread = nanmedian_rows(np.abs(ring - self.base[:, None])) / np.abs(self.base)


class BlockMeans:
    """Per element, the mean of what was added over each block of `block` samples, the last `blocks` of
    them in `ring` (elements, blocks); NaN for a block in which an element had nothing."""

    def __init__(self, size: int, blocks: int, block: int) -> None:
        self.block = block
        self.ring = np.full((size, blocks), np.nan)
        self.filled = 0  # blocks completed so far
        self._sum, self._count = np.zeros(size), np.zeros(size)
        self._in_block = 0

    def add(self, sums: np.ndarray, counts: np.ndarray) -> bool:
        """One sample's sums and counts per element; True where it completed a block."""
        self._sum += sums
        self._count += counts
        self._in_block += 1
        if self._in_block < self.block:
            return False
        with np.errstate(all="ignore"):
            self.ring[:, self.filled % self.ring.shape[1]] = np.where(self._count > 0, self._sum / self._count, np.nan)
        self.filled += 1
        self._sum[:], self._count[:], self._in_block = 0.0, 0.0, 0
        return True


def nanmedian_rows(values: np.ndarray) -> np.ndarray:
    """np.nanmedian(values, axis=1), NaN for a row with nothing seen, by one sort: NaN sorts last, so a
    row's median is the middle of its first `count` values. numpy's own takes a masked-array path where
    a row has a NaN, twenty times slower, and this runs for every signal of every job each block."""
    ordered = np.sort(values, axis=1)
    count = np.isfinite(values).sum(axis=1)
    rows = np.arange(values.shape[0])
    low, high = np.maximum(count - 1, 0) // 2, count // 2
    with np.errstate(all="ignore"):
        middle = (ordered[rows, low] + ordered[rows, high]) / 2
    return np.where(count > 0, middle, np.nan)


def finite_median(values: np.ndarray) -> float:
    """The median of the finite values (NaN where there is none)."""
    return float(np.median(values[np.isfinite(values)])) if np.isfinite(values).any() else math.nan


def finite_median_rows(values: np.ndarray) -> np.ndarray:
    """finite_median of each row of `values` (rows, elements)."""
    if values.shape[1] == 0:
        return np.full(values.shape[0], np.nan)
    return nanmedian_rows(np.where(np.isfinite(values), values, np.nan))


def nanmedian_last(values: np.ndarray) -> np.ndarray:
    """nanmedian_rows over the last axis of an array of any shape."""
    return nanmedian_rows(values.reshape(-1, values.shape[-1])).reshape(values.shape[:-1])


class SignalRows:
    """Signal (above) for many jobs whose signals have the same elements, a row per job (rows, elements),
    advanced together: the same arithmetic, value for value, so that each row reads what the job's own
    Signal would. Rows are added and reset by their owner (stragglers/batch.py)."""

    def __init__(self, size: int, fast: float, blocks: int, block: int, spread: bool = False) -> None:
        self.size, self.fast, self.track_spread = size, fast, spread
        self.now = np.full((0, size), np.nan)
        self.base = np.full((0, size), np.nan)
        self.spread = np.full((0, size), np.nan)
        self._means = BlockMeansRows(size, blocks, block)

    def resize(self, rows: int) -> None:
        """Room for `rows` rows, the new ones as a job's signal starts."""
        self.now, self.base, self.spread = (_grown(a, rows, np.nan) for a in (self.now, self.base, self.spread))
        self._means.resize(rows)

    def reset(self, row: int) -> None:
        self.now[row], self.base[row], self.spread[row] = np.nan, np.nan, np.nan
        self._means.reset(row)

    def observe(self, rows: np.ndarray, values: np.ndarray) -> None:
        """Signal.observe for each of `rows` (distinct), its values a row of `values`."""
        values = values.astype(float)
        now = self.now[rows]
        seen = np.isfinite(values)
        fill_now = ~np.isfinite(now) & seen
        now[fill_now] = values[fill_now]
        now[seen] += self.fast * (values[seen] - now[seen])
        self.now[rows] = now

    def learn(self, rows: np.ndarray, values: np.ndarray) -> None:
        """Signal.learn for each of `rows` (distinct)."""
        seen = np.isfinite(values)
        completed = self._means.add(rows, np.where(seen, values, 0.0), seen)
        if completed.size == 0:
            return
        ring = self._means.ring[completed]
        base = nanmedian_last(ring)
        self.base[completed] = base
        if self.track_spread:
            with np.errstate(all="ignore"):
                self.spread[completed] = nanmedian_last(np.abs(ring - base[..., None])) / np.abs(base)


class BlockMeansRows:
    """BlockMeans for many jobs, a row per job: each row's blocks complete by themselves (jobs learn at
    different times)."""

    def __init__(self, size: int, blocks: int, block: int) -> None:
        self.size, self.blocks, self.block = size, blocks, block
        self.ring = np.full((0, size, blocks), np.nan)
        self.filled = np.zeros(0, dtype=np.int64)
        self._sum, self._count = np.zeros((0, size)), np.zeros((0, size))
        self._in_block = np.zeros(0, dtype=np.int64)

    def resize(self, rows: int) -> None:
        self.ring = _grown(self.ring, rows, np.nan)
        self.filled, self._in_block = _grown(self.filled, rows, 0), _grown(self._in_block, rows, 0)
        self._sum, self._count = _grown(self._sum, rows, 0.0), _grown(self._count, rows, 0.0)

    def reset(self, row: int) -> None:
        self.ring[row], self.filled[row], self._in_block[row] = np.nan, 0, 0
        self._sum[row], self._count[row] = 0.0, 0.0

    def add(self, rows: np.ndarray, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """One sample's sums and counts per element of each of `rows` (distinct); the rows it completed a
        block of."""
        self._sum[rows] += sums
        self._count[rows] += counts
        self._in_block[rows] += 1
        done = rows[self._in_block[rows] >= self.block]
        if done.size == 0:
            return done
        total, count = self._sum[done], self._count[done]
        with np.errstate(all="ignore"):
            means = np.where(count > 0, total / count, np.nan)
        column = self.filled[done] % self.blocks
        self.ring[done[:, None], np.arange(self.size)[None, :], column[:, None]] = means
        self.filled[done] += 1
        self._sum[done], self._count[done], self._in_block[done] = 0.0, 0.0, 0
        return done


def _grown(values: np.ndarray, rows: int, fill: float) -> np.ndarray:
    """`values` with `rows` rows, those added filled with `fill`."""
    grown = np.full((rows, *values.shape[1:]), fill, dtype=values.dtype)
    grown[: values.shape[0]] = values
    return grown
