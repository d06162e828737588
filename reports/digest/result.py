"""What a digest cycle did, counted per outcome; and a message's next state after an attempt."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import date


@dataclass
class DigestResult:
    week: date
    busy: bool = False  # another process was running a digest: nothing done
    done_before: bool = False  # the week's digest had finished already: nothing done
    finished: bool = False  # every message of the week is now sent or given up
    chat: Counter[str] = field(default_factory=Counter)  # sent | retry | failed
    email: Counter[str] = field(default_factory=Counter)  # ... later (over the cycle's cap), skipped: why

    @property
    def pending(self) -> int:
        """Messages for a next cycle: to try again, or over this cycle's cap."""
        return self.chat["retry"] + self.email["retry"] + self.email["later"]


def next_state(result: str, attempts: int, max_attempts: int) -> str:
    """sent | failed | retry: a retry past the last attempt is given up (failed)."""
    if result == "retry" and attempts >= max_attempts:
        return "failed"
    return result
