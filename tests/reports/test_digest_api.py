"""The opt-out API over a real collector started with a digest configuration: changes want the admin
token, the list the read token; the configuration's opt-outs are listed and cannot be lifted here; and a
user opted out through the API gets no waste email."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import httpx
import psycopg
import pytest
import yaml

from gpuscope.reports.digest.run import send_digest, week_range
from tests.processes import RunningCollector, running_collector
from tests.reports.digest_helpers import HOSTILE_USER, RATES, Seeded, running_smtp, seed_week, settings_with

ADMIN = "admin-token-for-digest-tests"
READ = "read-token-for-digest-tests"


@pytest.fixture
def seeded(dsn: str) -> Seeded:
    return seed_week(dsn)


@pytest.fixture
def collector(seeded: Seeded, tmp_path: Path) -> Iterator[RunningCollector]:
    # Digests on a day 3 days from now: the last one is 4 days old, so the scheduler sends nothing here.
    weekday = (datetime.now(UTC) + timedelta(days=3)).strftime("%A").lower()
    config = tmp_path / "reports.yaml"
    config.write_text(yaml.safe_dump({"currency": "EUR", "digest": {"weekday": weekday, "opt_out": ["carol"]}}))
    with running_collector(seeded.dsn, admin_token=ADMIN, read_token=READ, reports_config=config) as running:
        yield running


def _call(collector: RunningCollector, method: str, user: str, token: str | None = ADMIN) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = f"{collector.url}/api/v1/reports/opt-out/{quote(user, safe='')}"
    return httpx.request(method, url, headers=headers, timeout=10)


def test_opting_out_wants_the_admin_token_and_is_listed(collector: RunningCollector) -> None:
    listing = f"{collector.url}/api/v1/reports/opt-out"
    assert httpx.get(listing, timeout=10).status_code == 401
    assert _call(collector, "PUT", "dave", token=None).status_code == 401
    assert _call(collector, "PUT", "dave", token=READ).status_code == 403
    put = _call(collector, "PUT", "dave")
    assert put.status_code == 200 and put.json()["user"] == "dave"
    since = put.json()["since"]
    assert _call(collector, "PUT", "dave").json()["since"] == since, "opting out again keeps the first time"
    assert _call(collector, "PUT", HOSTILE_USER).status_code == 200
    listed = httpx.get(listing, headers={"Authorization": f"Bearer {READ}"}, timeout=10).json()
    assert [(e["user"], e["source"]) for e in listed] == [
        (HOSTILE_USER, "api"), ("dave", "api"), ("carol", "config")
    ]  # fmt: skip

    assert _call(collector, "DELETE", "dave", token=READ).status_code == 403
    assert _call(collector, "DELETE", "dave").json() == {"user": "dave", "opted_out": False}
    assert _call(collector, "DELETE", "dave").status_code == 404
    refused = _call(collector, "DELETE", "carol")
    assert refused.status_code == 409 and "configuration" in refused.json()["detail"]


def test_a_user_opted_out_through_the_api_gets_no_email(
    collector: RunningCollector, seeded: Seeded, tmp_path: Path
) -> None:
    assert _call(collector, "PUT", "alice").status_code == 200
    with running_smtp() as (sink, port), psycopg.connect(seeded.dsn, autocommit=True) as conn:
        now = week_range(seeded.week).end + timedelta(hours=8)
        result = send_digest(conn, seeded.week, settings_with(tmp_path, smtp_port=port), now, RATES)
    assert result.email["skipped: opted out"] == 3, "alice and dave (the table), carol (the configuration)"
    assert sink.recipients == ["gina@example.org"]
