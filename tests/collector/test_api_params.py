"""One vocabulary for a time window: the read API takes the dashboard's `range=` (6h, FROM..TO) besides
`minutes=`, refuses the two when they disagree, and refuses a query parameter it does not know, on every
GET of /api/v1, naming it and the ones the route takes (an ignored one answered the default window)."""

from __future__ import annotations

import httpx
import pytest

from tests.processes import RunningCollector


def get(collector: RunningCollector, path: str, query: str) -> httpx.Response:
    return httpx.get(f"{collector.url}/api/v1/{path}?{query}", timeout=30)


def test_range_names_the_window_as_the_dashboard_does(collector: RunningCollector) -> None:
    span = get(collector, "rack-power", "range=2026-11-20T08:00..2026-11-20T10:00")
    assert span.status_code == 200, span.text
    assert span.json()["times"][0] == "2026-11-20T08:00:00Z"
    assert span.json()["times"][-1] < "2026-11-20T10:00:00Z"
    six_hours = get(collector, "rack-power", "range=6h").json()
    same = get(collector, "rack-power", "minutes=360").json()
    default = get(collector, "rack-power", "").json()
    assert (six_hours["bucket_seconds"], len(six_hours["times"])) == (same["bucket_seconds"], len(same["times"]))
    assert six_hours["bucket_seconds"] != default["bucket_seconds"], "not the default hour"
    agreeing = get(collector, "rack-power", "range=1h&minutes=60")
    assert agreeing.status_code == 200, "minutes saying the same as range is no conflict"


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("range=6h&minutes=60", "range=6h and minutes=60 disagree: give one of them"),
        ("range=2026-11-20T08:00..2026-11-20T10:00&minutes=120", "disagree"),
        ("range=6h&start=2026-11-20T08:00:00Z", "give range, or start (and end), not both"),
        ("range=3d", "range: unknown range '3d': one of 15m, 1h, 6h, 24h, 7d, or FROM..TO in UTC"),
        ("range=2026-11-20T10:00..2026-11-20T08:00", "the range must end after it starts"),
        ("range=0001-01-01T00:00%2B01:00..2026-11-20T08:00", "not a date and time of telemetry"),
    ],
)
def test_a_range_that_cannot_be_meant_is_refused_in_words(collector: RunningCollector, query: str, words: str) -> None:
    refused = get(collector, "rack-power", query)
    assert refused.status_code == 422, refused.text
    assert words in refused.json()["detail"]


def test_an_unknown_parameter_is_refused_naming_the_accepted_ones(collector: RunningCollector) -> None:
    refused = get(collector, "rack-power", "rnage=6h")
    assert refused.status_code == 422
    assert refused.json()["detail"] == (
        "unknown query parameter rnage for /api/v1/rack-power: it takes bucket_seconds, end, minutes, range, start"
    )
    several = get(collector, "fleet", "range=6h&x=1")
    assert several.json()["detail"] == "unknown query parameters range, x for /api/v1/fleet: it takes none"


def test_every_get_of_the_api_refuses_an_unknown_parameter(collector: RunningCollector) -> None:
    """Every GET route the collector describes, the extensions' (alerts, health, reports) included."""
    spec = httpx.get(f"{collector.url}/openapi.json", timeout=10).json()
    routes = [path for path, operations in spec["paths"].items() if path.startswith("/api/v1/") and "get" in operations]
    assert len(routes) > 20, routes
    for path in routes:
        url = collector.url + path.replace("{", "").replace("}", "") + "?no_such_parameter=1"
        refused = httpx.get(url, timeout=30)
        assert refused.status_code == 422, (path, refused.text)
        assert refused.json()["detail"].startswith(f"unknown query parameter no_such_parameter for {path}: it takes")
