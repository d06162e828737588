"""What a validation run says: an Outcome (passed or not, the command and what it said), and the test that
failed, in words an operator acts on ("GPU Memory (GPU 3)"), for the loop to keep with the episode."""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.health.schedulers.base import Outcome


@dataclass(frozen=True)
class ValidationOutcome(Outcome):
    failed_test: str | None = None  # None when it passed


@dataclass(frozen=True)
class Verdict:
    """What a tool's output says, before the command's name and output tail are added."""

    failed_test: str | None  # None: passed
    why: str = ""  # in a sentence: the warning DCGM printed, the bus bandwidth reached

    @property
    def ok(self) -> bool:
        return self.failed_test is None
