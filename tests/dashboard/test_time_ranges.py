"""Ranges beyond the four presets: 7 days, and any span of history, carried in the URL so that a view of
an incident can be shared; bad spans refused in words. Parsing as pure functions, the picker through a
real dashboard's callback, as the browser calls it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest

from gpuscope.dashboard import time_ranges
from tests.dashboard.helpers import serving

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("key", "seconds"), [("15m", 900), ("1h", 3600), ("24h", 86400), ("7d", 7 * 86400)])
def test_presets_end_now(key: str, seconds: int) -> None:
    window = time_ranges.parse(key, NOW)
    assert (window.end, window.seconds) == (NOW, seconds)


def test_a_custom_span_round_trips_through_its_key() -> None:
    start, end = datetime(2026, 11, 20, 8, 0, tzinfo=UTC), datetime(2026, 11, 21, 9, 30, tzinfo=UTC)
    key = time_ranges.custom(start, end)
    assert key == "2026-11-20T08:00..2026-11-21T09:30"
    window = time_ranges.parse(key)
    assert (window.start, window.end) == (start, end)
    assert time_ranges.label(key) == "2026-11-20 08:00 to 2026-11-21 09:30 UTC"
    assert time_ranges.label("2026-11-20T08:00..2026-11-20T09:30") == "2026-11-20 08:00 to 09:30 UTC"
    assert {"label": time_ranges.label(key), "value": key} in time_ranges.options(key)


def test_an_offset_is_honoured_and_no_offset_means_utc() -> None:
    window = time_ranges.parse("2026-11-20T08:00+01:00..2026-11-20 10:00")
    assert window.start == datetime(2026, 11, 20, 7, 0, tzinfo=UTC)
    assert window.end == datetime(2026, 11, 20, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("3d", "unknown range"),
        ("2026-11-20T08:00..2026-11-20T07:00", "end after it starts"),
        ("2026-11-20T08:00..2026-11-20T08:00", "end after it starts"),
        ("yesterday..today", "not a date and time"),
        ("2026-01-01T00:00..2026-06-01T00:00", "at most 92 days"),
        ("", "unknown range"),
    ],
)
def test_bad_ranges_are_refused_in_words(key: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        time_ranges.parse(key)
    assert not time_ranges.valid(key)


def apply_custom(base: str, start: str | None, end: str | None) -> dict:
    """Press the overview picker's "show" button with these fields, as the browser does."""
    payload = {
        "output": "..range.options...range.value...range-error.children..",
        "outputs": [
            {"id": "range", "property": "options"},
            {"id": "range", "property": "value"},
            {"id": "range-error", "property": "children"},
        ],
        "inputs": [{"id": "range-apply", "property": "n_clicks", "value": 1}],
        "state": [
            {"id": "range-from", "property": "value", "value": start},
            {"id": "range-to", "property": "value", "value": end},
        ],
        "changedPropIds": ["range-apply.n_clicks"],
    }
    response = httpx.post(f"{base}/_dash-update-component", json=payload, timeout=10)
    if response.status_code == 204:  # no_update everywhere
        return {}
    response.raise_for_status()
    return response.json()["response"]


def test_the_picker_turns_two_moments_into_a_shareable_range() -> None:
    yesterday = (datetime.now(UTC) - timedelta(days=1)).replace(second=0, microsecond=0)
    start, end = f"{yesterday:%Y-%m-%d %H:%M}", f"{yesterday + timedelta(hours=2):%Y-%m-%d %H:%M}"
    with serving() as base:
        chosen = apply_custom(base, start, end)
        key = chosen["range"]["value"]
        assert key == f"{yesterday:%Y-%m-%dT%H:%M}..{yesterday + timedelta(hours=2):%Y-%m-%dT%H:%M}"
        assert [o["value"] for o in chosen["range"]["options"]][-2:] == ["7d", key]
        assert chosen["range-error"]["children"] == ""

        refused = apply_custom(base, end, start)
        assert "end after it starts" in refused["range-error"]["children"]
        assert "range" not in refused, "a refused span leaves the range as it was"
        assert "both a start and an end" in apply_custom(base, start, None)["range-error"]["children"]
