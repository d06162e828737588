"""Whether a job's ranks move in lock-step: the test a job passes before it is judged for stragglers.

In a synchronous job (data, pipeline, tensor or expert parallel training) every rank waits for the others
at each collective, so the job has one pace: whatever the split of the work, each part's share of the
job's activity stays where it is, and a change of pace (a pause, a slow rank, a heavier phase) moves
every part together. Independent replicas (inference serving, arrays of single-GPU tasks) each follow
their own load, so their shares wander by themselves. A straggler is a rank the others wait for; where
nobody waits there is none, and such a job is not judged.

The measure, over the same healthy blocks the detector learns its normals from: per part (a node, whose
GPUs serve one replica or share one host; single GPUs in jobs on fewer than four nodes, where the median
of three or fewer parts would be one of them), the log of its
30 s mean activity against its own median; the job's common movement is the mean of these per block
(not their median, which in a job of three replicas is one of them, whose own wander would then read
as none); what is left is each part's own wander, its median absolute deviation over the blocks. The
job's wander is the median over parts, so one culprit, or a minority of busier parts (hot experts),
leave a synchronous job synchronous. Activity below 1% counts as 1%: an idle replica is not infinitely far
from a busy one.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from gpuscope.stragglers.signal import BlockMeans, BlockMeansRows, nanmedian_last, nanmedian_rows

SYNCHRONOUS = "synchronous"
INDEPENDENT = "independent"
UNDECIDED = "undecided"  # not enough healthy running seen yet; judged as synchronous meanwhile
MIN_BLOCKS = 20  # ten minutes of healthy running (the detector's warm-up) before a job is called either


class Synchrony:
    def __init__(
        self,
        part_of: np.ndarray,
        blocks: int,
        block: int,
        first: float = 0.04,
        enter: float = 0.06,
        leave: float = 0.03,
    ) -> None:
        """`part_of[rank]`: the part (0..k-1) a rank belongs to. A job is first called independent or
        synchronous on `first`; then independent once its wander reaches `enter`, and synchronous again
        once it falls below `leave` (hysteresis, so a job near the line does not flip every block).
        Synchronous jobs of every family measured stay under 0.025; independent replicas over 0.04."""
        self.part_of = np.asarray(part_of)
        self.parts = int(self.part_of.max()) + 1 if self.part_of.size else 0
        self.first, self.enter, self.leave = first, enter, leave
        self._means = BlockMeans(self.parts, blocks, block)
        self.wander = math.nan
        # Two parts are each other's only peer: nothing tells lock-step from chance, so such a job is
        # taken as what most are (training).
        self.model = UNDECIDED if self.parts >= 3 else SYNCHRONOUS

    @classmethod
    def for_job(cls, node_of: np.ndarray, blocks: int, block: int) -> Synchrony:
        """Over twice the blocks of the detector's normals: a wander measured over a few blocks is noisy,
        and a job near the line would flip with it."""
        nodes = int(node_of.max()) + 1 if node_of.size else 0
        return cls(node_of if nodes >= 4 else np.arange(node_of.size), 2 * blocks, block)

    @property
    def synchronous(self) -> bool:
        return self.model != INDEPENDENT

    def learn(self, activity: np.ndarray) -> None:
        """One healthy sample of per-rank activity (NaN: missing)."""
        if self.parts < 3:
            return
        seen = np.isfinite(activity)
        sums = np.bincount(self.part_of[seen], weights=activity[seen], minlength=self.parts)
        completed = self._means.add(sums, np.bincount(self.part_of[seen], minlength=self.parts))
        if completed and self._means.filled >= MIN_BLOCKS:
            self._judge()

    def _judge(self) -> None:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a block with no part seen: NaN, skipped
            level = np.log(np.maximum(self._means.ring, 1.0))
            level -= nanmedian_rows(level)[:, None]
            own = level - np.nanmean(level, axis=0, keepdims=True)
            deviation = nanmedian_rows(np.abs(own - nanmedian_rows(own)[:, None]))
            wander = float(nanmedian_rows(deviation[None, :])[0])
        if not math.isfinite(wander):
            return
        self.wander = wander
        if self.model == UNDECIDED:
            self.model = INDEPENDENT if wander >= self.first else SYNCHRONOUS
        elif self.model == SYNCHRONOUS and wander >= self.enter:
            self.model = INDEPENDENT
        elif self.model == INDEPENDENT and wander < self.leave:
            self.model = SYNCHRONOUS


_MODELS = (UNDECIDED, SYNCHRONOUS, INDEPENDENT)  # SynchronyRows' codes: positions in this


class SynchronyRows:
    """Synchrony for many jobs of one layout, a row per job, learnt and judged together: the same
    arithmetic, value for value, as each job's own Synchrony."""

    def __init__(self, part_of: np.ndarray, blocks: int, block: int) -> None:
        self._one = Synchrony(part_of, blocks, block)  # the thresholds and the parts, for every row
        self.part_of, self.parts = self._one.part_of, self._one.parts
        self._first_model = _MODELS.index(self._one.model)
        self._means = BlockMeansRows(self.parts, blocks, block)
        self.model = np.zeros(0, dtype=np.int64)
        self.wander = np.zeros(0)

    @classmethod
    def for_job(cls, node_of: np.ndarray, blocks: int, block: int) -> SynchronyRows:
        """As Synchrony.for_job."""
        nodes = int(node_of.max()) + 1 if node_of.size else 0
        return cls(node_of if nodes >= 4 else np.arange(node_of.size), 2 * blocks, block)

    def resize(self, rows: int) -> None:
        self._means.resize(rows)
        model, wander = np.full(rows, self._first_model), np.full(rows, np.nan)
        model[: self.model.size], wander[: self.wander.size] = self.model, self.wander
        self.model, self.wander = model, wander

    def reset(self, row: int) -> None:
        self._means.reset(row)
        self.model[row], self.wander[row] = self._first_model, np.nan

    def model_of(self, row: int) -> str:
        return _MODELS[int(self.model[row])]

    def synchronous(self, rows: np.ndarray) -> np.ndarray:
        return self.model[rows] != _MODELS.index(INDEPENDENT)

    def learn(self, rows: np.ndarray, activity: np.ndarray) -> None:
        """Synchrony.learn for each of `rows` (distinct), its activity a row of `activity`."""
        if self.parts < 3:
            return
        seen = np.isfinite(activity)
        values = np.where(seen, activity, 0.0)
        sums, counts = np.zeros((rows.size, self.parts)), np.zeros((rows.size, self.parts))
        for rank, part in enumerate(self.part_of):  # rank by rank, as np.bincount adds: the same sums
            sums[:, part] += values[:, rank]
            counts[:, part] += seen[:, rank]
        completed = self._means.add(rows, sums, counts)
        judged = completed[self._means.filled[completed] >= MIN_BLOCKS]
        if judged.size:
            self._judge(judged)

    def _judge(self, rows: np.ndarray) -> None:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a block with no part seen: NaN, skipped
            level = np.log(np.maximum(self._means.ring[rows], 1.0))
            level -= nanmedian_last(level)[..., None]
            own = level - np.nanmean(level, axis=1, keepdims=True)
            deviation = nanmedian_last(np.abs(own - nanmedian_last(own)[..., None]))
            wander = nanmedian_rows(deviation)
        known = np.isfinite(wander)
        rows, wander = rows[known], wander[known]
        self.wander[rows] = wander
        one = self._one
        undecided, synchronous, independent = range(len(_MODELS))
        model = self.model[rows]
        self.model[rows] = np.select(
            [
                model == undecided,
                (model == synchronous) & (wander >= one.enter),
                (model == independent) & (wander < one.leave),
            ],
            [np.where(wander >= one.first, independent, synchronous), independent, synchronous],
            model,
        )
