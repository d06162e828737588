"""Waiting on state, not on the clock: poll a check until it holds, and fail saying what never happened.

A check returns something truthy once the state is reached (that value is returned), or raises
AssertionError (or one of `ignoring`) while it is not; a check made of assertions ends with `return True`
(or the value it checked). Any other exception is a real error and ends the wait at once."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(
    check: Callable[[], T],
    *,
    what: str,
    timeout: float = 10.0,
    interval: float = 0.05,
    ignoring: tuple[type[BaseException], ...] = (AssertionError,),
) -> T:
    """Call `check` every `interval` seconds until it returns something truthy, and return that; after
    `timeout` seconds fail with `what` and the last value or error."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except ignoring as exc:
            error: BaseException | None = exc
        else:
            if value:
                return value
            error = None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _timed_out(what, timeout, value if error is None else None, error) from error
        time.sleep(min(interval, remaining))


async def eventually_async(
    check: Callable[[], T | Awaitable[T]],
    *,
    what: str,
    timeout: float = 10.0,
    interval: float = 0.05,
    ignoring: tuple[type[BaseException], ...] = (AssertionError,),
) -> T:
    """`eventually` for async tests: `check` may return an awaitable (e.g. `asyncio.to_thread(...)` for
    a blocking query), and the pauses let the event loop run."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
            if inspect.isawaitable(value):
                value = await value
        except ignoring as exc:
            error: BaseException | None = exc
        else:
            if value:
                return value  # type: ignore[return-value]
            error = None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _timed_out(what, timeout, value if error is None else None, error) from error
        await asyncio.sleep(min(interval, remaining))


def _timed_out(what: str, timeout: float, value: object, error: BaseException | None) -> AssertionError:
    last = f"last error: {type(error).__name__}: {error}" if error is not None else f"last value: {value!r}"
    return AssertionError(f"timed out after {timeout:g} s waiting for {what} ({last})")
