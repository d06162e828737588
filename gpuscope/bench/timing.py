"""Timing a read as a dashboard makes it: warmed once (it asks the same every few seconds), then timed."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def timed(ask: Callable[[], T], runs: int) -> tuple[list[float], T]:
    """Milliseconds per run after a warming one, and the last answer."""
    answer = ask()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        answer = ask()
        times.append((time.perf_counter() - started) * 1000)
    return times, answer


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[18] if len(values) > 1 else values[0]
