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
