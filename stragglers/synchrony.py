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

from gpuscope.stragglers.signal import BlockMeans, nanmedian_rows

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
