"""What a straggler cost: each episode's GPU-hours lost (GPUs held x time slowed x s / (1 + s)), and the
sums by job, node, cause and user over a span, through the real read API. Figures computed by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import psycopg
import pytest

from tests.alerts.telemetry import add_node
from tests.processes import RunningCollector

NOW = datetime.now(UTC).replace(microsecond=0)  # at collection: tests run minutes later, sums end here
T0 = NOW - timedelta(hours=10)


def allocate(dsn: str, job: str, user: str, gpu_ids: list[int], start: datetime, end: datetime | None) -> None:
    with psycopg.connect(dsn) as conn:
        for gpu_id in gpu_ids:
            conn.execute(
                "INSERT INTO job_allocation (job_id, username, node_id, gpu_id, started_at, last_seen, ended_at)"
                " SELECT %s, %s, node_id, gpu_id, %s, coalesce(%s, now()), %s FROM gpu WHERE gpu_id = %s",
                (job, user, start, end, end, gpu_id),
            )


def straggler(
    dsn: str, job: str, gpu_id: int, cause: str, slowdown: float, start: datetime, end: datetime | None
) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO straggler (job_id, node_id, gpu_id, cause, slowdown, started_at, declared_at, ended_at)"
            " SELECT %s, node_id, gpu_id, %s, %s, %s, %s + interval '30 seconds', %s FROM gpu WHERE gpu_id = %s",
            (job, cause, slowdown, start, start, end, gpu_id),
        )


@pytest.fixture
def cluster(collector: RunningCollector) -> RunningCollector:
    """Two jobs: "big" on 16 GPUs of two nodes (ada), "small" on 4 GPUs of a third (bob).
    big: GPU 3 of n1 thermal, 25% slow for 2 h (ended); then n2's GPU 0 power-capped 10% slow, still on
    since 1 h ago. small: n3 GPU 1, 50% slow for 30 min (ended)."""
    dsn = collector.dsn
    n1, n2, n3 = (add_node(dsn, name, gpus=8) for name in ("n1", "n2", "n3"))
    allocate(dsn, "big", "ada", n1 + n2, T0, None)
    allocate(dsn, "small", "bob", n3[:4], T0, T0 + timedelta(hours=6))
    straggler(dsn, "big", n1[3], "thermal", 0.25, T0 + timedelta(hours=1), T0 + timedelta(hours=3))
    straggler(dsn, "big", n2[0], "power_cap", 0.10, NOW - timedelta(hours=1), None)
    straggler(dsn, "small", n3[1], "unknown", 0.50, T0 + timedelta(hours=2), T0 + timedelta(hours=2, minutes=30))
    return collector


THERMAL = 16 * 2.0 * 0.25 / 1.25  # 6.4 GPU-hours
POWER_SO_FAR = 16 * 1.0 * 0.10 / 1.10  # 1.4545...: its hour up to NOW (it goes on: sums end at NOW)
SMALL = 4 * 0.5 * 0.50 / 1.50  # 0.6667


def get(collector: RunningCollector, path: str, **params: str) -> dict | list:  # type: ignore[type-arg]
    response = httpx.get(f"{collector.url}{path}", params=params, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_each_episode_carries_its_cost(cluster: RunningCollector) -> None:
    rows = get(cluster, "/api/v1/stragglers", start=(T0 - timedelta(hours=1)).isoformat(), end=NOW.isoformat())
    by_cause = {r["cause"]: r for r in rows}  # type: ignore[union-attr]
    assert (by_cause["thermal"]["gpus"], by_cause["thermal"]["user"]) == (16, "ada")
    assert by_cause["thermal"]["gpu_hours_lost"] == pytest.approx(THERMAL, rel=1e-6)
    assert by_cause["unknown"]["gpus"] == 4 and by_cause["unknown"]["gpu_hours_lost"] == pytest.approx(SMALL, rel=1e-6)
    so_far = 16 * (datetime.now(UTC) - (NOW - timedelta(hours=1))).total_seconds() / 3600 * 0.10 / 1.10
    assert by_cause["power_cap"]["gpu_hours_lost"] == pytest.approx(so_far, rel=0.01)  # still running: growing


@pytest.mark.parametrize(
    ("by", "expected"),
    [
        ("job", {"big": THERMAL + POWER_SO_FAR, "small": SMALL}),
        ("node", {"test/n1": THERMAL, "test/n2": POWER_SO_FAR, "test/n3": SMALL}),
        ("cause", {"thermal": THERMAL, "power_cap": POWER_SO_FAR, "unknown": SMALL}),
        ("user", {"ada": THERMAL + POWER_SO_FAR, "bob": SMALL}),
    ],
)
def test_sums_by_each_dimension_add_up(cluster: RunningCollector, by: str, expected: dict[str, float]) -> None:
    report = get(cluster, "/api/v1/reports/stragglers", start=T0.isoformat(), end=NOW.isoformat(), by=by)
    got = {row["key"]: row["gpu_hours_lost"] for row in report["rows"]}  # type: ignore[call-overload, index]
    assert got == pytest.approx(expected, rel=0.01)
    assert [row["key"] for row in report["rows"]] == sorted(expected, key=lambda k: -expected[k])  # type: ignore[call-overload, index]
    assert report["totals"]["episodes"] == 3  # type: ignore[call-overload, index]
    assert report["totals"]["gpu_hours_lost"] == pytest.approx(sum(expected.values()), rel=0.01)  # type: ignore[call-overload, index]


def test_a_span_counts_only_what_falls_inside_it(cluster: RunningCollector) -> None:
    """The thermal episode ran T0+1h..T0+3h: a span from T0+2.5h holds its last half hour only."""
    start, end = T0 + timedelta(hours=2, minutes=30), T0 + timedelta(hours=5)
    report = get(cluster, "/api/v1/reports/stragglers", start=start.isoformat(), end=end.isoformat(), by="cause")
    assert {row["key"]: row["gpu_hours_lost"] for row in report["rows"]} == pytest.approx(  # type: ignore[call-overload, index]
        {"thermal": 16 * 0.5 * 0.25 / 1.25}
    )


def test_a_bad_dimension_is_refused(cluster: RunningCollector) -> None:
    response = httpx.get(f"{cluster.url}/api/v1/reports/stragglers", params={"by": "rack"}, timeout=10)
    assert response.status_code == 422 and "by" in response.text
