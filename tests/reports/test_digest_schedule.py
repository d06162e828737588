"""The digest's schedule: which week is due when, that the scheduler sends a week once (run twice, or by
two processes at once), waits for the week's usage to settle, and leaves a week it missed by a day."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
import yaml

from gpuscope.reports.digest.loop import MAX_LATE, RETRY_AFTER, SETTLE_WAIT, run_if_due, scheduled_week
from gpuscope.reports.digest.result import DigestResult
from gpuscope.reports.digest.run import send_digest, week_range
from gpuscope.reports.digest.settings import DigestSettings
from tests.alerts.receiver import ChatReceiver
from tests.processes import running_collector
from tests.reports.digest_helpers import RATES, Seeded, seed_week, settings_with


@pytest.fixture
def seeded(dsn: str) -> Seeded:
    return seed_week(dsn)


@pytest.fixture
def chat() -> Iterator[ChatReceiver]:
    with ChatReceiver() as receiver:
        yield receiver


def test_the_due_week_is_the_seven_days_before_the_digest_day() -> None:
    monday_8 = DigestSettings()  # mondays at 08:00 UTC
    at = datetime(2025, 3, 10, 8, 30, tzinfo=UTC)  # a Monday
    assert scheduled_week(at, monday_8) == (date(2025, 3, 3), datetime(2025, 3, 10, 8, tzinfo=UTC))
    before = datetime(2025, 3, 10, 7, 59, tzinfo=UTC)
    assert scheduled_week(before, monday_8) == (date(2025, 2, 24), datetime(2025, 3, 3, 8, tzinfo=UTC))
    friday_18 = DigestSettings(weekday=4, hour_utc=18)
    assert scheduled_week(at, friday_18) == (date(2025, 2, 28), datetime(2025, 3, 7, 18, tzinfo=UTC))


def _settings_for(seeded: Seeded, chat: ChatReceiver, tmp_path: Path) -> tuple[DigestSettings, datetime]:
    """Digests on the seeded week's weekday at 00:00, to the chat receiver; and a time it is due."""
    settings = settings_with(tmp_path, chat=[{"kind": "webhook", "url": chat.url + "/hook"}])
    settings = dataclasses.replace(settings, weekday=seeded.week.weekday(), hour_utc=0)
    due = week_range(seeded.week).end
    assert scheduled_week(due + SETTLE_WAIT, settings) == (seeded.week, due)
    return settings, due + SETTLE_WAIT


def test_running_the_scheduler_twice_for_a_week_sends_it_once(
    seeded: Seeded, chat: ChatReceiver, tmp_path: Path
) -> None:
    settings, now = _settings_for(seeded, chat, tmp_path)
    with psycopg.connect(seeded.dsn, autocommit=True) as conn:
        first = run_if_due(conn, settings, RATES, now)
        assert first is not None and first.finished and first.chat["sent"] == 3
        assert run_if_due(conn, settings, RATES, now) is None
        assert run_if_due(conn, settings, RATES, now + RETRY_AFTER + timedelta(minutes=1)) is None
        assert send_digest(conn, seeded.week, settings, now, RATES).done_before
    assert len(chat.at("/hook")) == 3


def test_two_processes_at_once_send_a_week_once(seeded: Seeded, chat: ChatReceiver, tmp_path: Path) -> None:
    settings, now = _settings_for(seeded, chat, tmp_path)
    results: list[DigestResult | None] = []
    start = threading.Barrier(2)

    def replica() -> None:
        with psycopg.connect(seeded.dsn, autocommit=True) as conn:
            start.wait()
            results.append(run_if_due(conn, settings, RATES, now))

    threads = [threading.Thread(target=replica) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(results) == 2
    assert sum(bool(r and r.chat["sent"]) for r in results) == 1, results
    assert len(chat.at("/hook")) == 3, "each account's summary once"


def test_a_week_waits_for_its_usage_and_is_left_when_missed_by_a_day(
    seeded: Seeded, chat: ChatReceiver, tmp_path: Path
) -> None:
    settings, settled = _settings_for(seeded, chat, tmp_path)
    due = settled - SETTLE_WAIT
    with psycopg.connect(seeded.dsn, autocommit=True) as conn:
        # The seeded week ends in the future: its last hour has not been computed, jobs ran before its end.
        assert run_if_due(conn, settings, RATES, due + timedelta(minutes=5)) is None, "usage not settled yet"
        assert run_if_due(conn, settings, RATES, due + MAX_LATE + timedelta(minutes=1)) is None, "too late"
        assert conn.execute("SELECT count(*) FROM report_digest_run").fetchone() == (0,)
        assert not chat.at("/hook")
        # Once the week's last hour has been computed after it settled, the digest goes.
        end = week_range(seeded.week).end
        conn.execute(
            "INSERT INTO usage_hour (bucket, computed_at, final) VALUES (%s, %s, false)",
            (end - timedelta(hours=1), end + timedelta(minutes=40)),
        )
        sent = run_if_due(conn, settings, RATES, due + timedelta(minutes=45))
        assert sent is not None and sent.finished and len(chat.at("/hook")) == 3


def test_a_collector_with_a_digest_configuration_sends_the_due_week(
    dsn: str, chat: ChatReceiver, tmp_path: Path
) -> None:
    now = datetime.now(UTC)
    (tmp_path / "url").write_text(chat.url + "/hook")
    digest = {"weekday": now.strftime("%A").lower(), "hour_utc": now.hour, "accounts": ["ml"],
              "chat": [{"kind": "webhook", "url_file": str(tmp_path / "url")}]}  # fmt: skip
    config = tmp_path / "reports.yaml"
    config.write_text(yaml.safe_dump({"digest": digest}))
    week, _ = scheduled_week(now, DigestSettings(weekday=now.weekday(), hour_utc=now.hour))
    with running_collector(dsn, reports_config=config):
        (received,) = chat.wait_for("/hook", 1)
    assert received.body["account"] == "ml" and received.body["figures"] is None, "no jobs: a summary that says so"
    assert received.body["week_start"] == week.isoformat()
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT week, finished_at IS NOT NULL FROM report_digest_run").fetchall() == [(week, True)]
