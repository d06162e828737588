"""The suite's one way of waiting: eventually() and eventually_async()."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tests.waiting import eventually, eventually_async


def test_returns_the_first_truthy_value() -> None:
    values = iter([0, None, [], 7, 8])
    assert eventually(lambda: next(values), interval=0, what="a number") == 7


def test_an_assertion_inside_is_retried_until_it_holds() -> None:
    calls = itertools.count(1)

    def third_time() -> str:
        n = next(calls)
        assert n >= 3, f"call {n}"
        return "done"

    assert eventually(third_time, interval=0, what="the third call") == "done"


def test_a_timeout_names_what_and_the_last_value_or_error() -> None:
    with pytest.raises(AssertionError, match=r"timed out after 0\.1 s waiting for rows \(last value: 0\)"):
        eventually(lambda: 0, timeout=0.1, interval=0.01, what="rows")

    def never() -> bool:
        raise AssertionError("2 so far")

    with pytest.raises(AssertionError, match=r"waiting for requests \(last error: AssertionError: 2 so far\)"):
        eventually(never, timeout=0.1, interval=0.01, what="requests")


def test_other_errors_end_the_wait_at_once_unless_ignored() -> None:
    calls = itertools.count(1)

    def broken() -> bool:
        next(calls)
        raise KeyError("bug")

    with pytest.raises(KeyError):
        eventually(broken, timeout=5, what="anything")
    assert next(calls) == 2, "called once"
    with pytest.raises(AssertionError, match="last error: KeyError"):
        eventually(broken, timeout=0.1, interval=0.01, ignoring=(KeyError,), what="anything")


def test_the_async_variant_awaits_what_the_check_returns() -> None:
    values = iter([0, 0, 5])

    async def later() -> int:
        await asyncio.sleep(0)
        return next(values)

    assert asyncio.run(eventually_async(later, interval=0, what="five")) == 5
    assert asyncio.run(eventually_async(lambda: "sync too", what="a plain value")) == "sync too"
    with pytest.raises(AssertionError, match="waiting for nothing"):
        asyncio.run(eventually_async(lambda: asyncio.sleep(0), timeout=0.05, interval=0.01, what="nothing"))
