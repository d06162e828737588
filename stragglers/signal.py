"""A signal the straggler detector follows per element (rank, node, port): what it reads now and what is
normal for it."""

from __future__ import annotations

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
        self._ring = np.empty((0, blocks))
        self._next = 0
        self._sum = np.empty(0)
        self._count = np.empty(0)
        self._in_block = 0

    def observe(self, values: np.ndarray) -> None:
        values = values.astype(float)
        if self.now.size == 0:
            self.now = np.full(values.size, np.nan)
            self.base = np.full(values.size, np.nan)
            self.spread = np.full(values.size, np.nan)
            self._ring = np.full((values.size, self.blocks), np.nan)
            self._sum, self._count = np.zeros(values.size), np.zeros(values.size)
        seen = np.isfinite(values)
        fill_now = ~np.isfinite(self.now) & seen
        self.now[fill_now] = values[fill_now]
        self.now[seen] += self.fast * (values[seen] - self.now[seen])

    def learn(self, values: np.ndarray) -> None:
        """Add values already observed to the normal."""
        seen = np.isfinite(values)
        self._sum[seen] += values[seen]
        self._count[seen] += 1
        self._in_block += 1
        if self._in_block < self.block:
            return
        with np.errstate(all="ignore"):
            self._ring[:, self._next] = np.where(self._count > 0, self._sum / self._count, np.nan)
        self._next = (self._next + 1) % self.blocks
        self._sum[:], self._count[:], self._in_block = 0.0, 0.0, 0
        self.base = nanmedian_rows(self._ring)  # an element never seen: NaN, as it should
        if self.track_spread:
            with np.errstate(all="ignore"):
                self.spread = nanmedian_rows(np.abs(self._ring - self.base[:, None])) / np.abs(self.base)


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
