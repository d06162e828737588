"""send_digest against a real SMTP server and a real HTTP receiver on 127.0.0.1, over a seeded week: who
gets a waste email and what it says, the rate limit, opt-outs, the chat summaries' figures per account,
hostile names, and failures retried without stopping the other messages."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from gpuscope.alerts.notify.escape import ZWSP
from gpuscope.collector.query.usage import usage_report
from gpuscope.reports.digest.run import send_digest, week_range
from tests.alerts.receiver import ChatReceiver, Reply
from tests.reports.digest_helpers import (
    HOSTILE_ACCOUNT,
    RATES,
    Seeded,
    SmtpSink,
    running_smtp,
    seed_week,
    settings_with,
)

SECRET_PATH = "/services/T0001/B0001/s3cr3tW3bh00kT0k3n"


@pytest.fixture
def seeded(dsn: str) -> Seeded:
    return seed_week(dsn)


@pytest.fixture
def smtp() -> Iterator[tuple[SmtpSink, int]]:
    with running_smtp() as running:
        yield running


@pytest.fixture
def chat() -> Iterator[ChatReceiver]:
    with ChatReceiver() as receiver:
        yield receiver


def _now(seeded: Seeded) -> datetime:
    return week_range(seeded.week).end + timedelta(hours=8)


def test_waste_emails_go_to_users_over_the_thresholds_once_a_week(
    seeded: Seeded, smtp: tuple[SmtpSink, int], tmp_path: Path
) -> None:
    sink, port = smtp
    settings = settings_with(tmp_path, smtp_port=port)
    now = _now(seeded)
    with psycopg.connect(seeded.dsn, autocommit=True) as conn:
        first = send_digest(conn, seeded.week, settings, now, RATES)
        assert first.finished and first.email["sent"] == 2
        assert first.email["skipped: opted out"] == 2, "carol in the configuration, dave in the table"
        assert first.email["skipped: no address"] == 1, "a user name with a line break gets no address"
        assert sink.recipients == ["alice@example.org", "gina@example.org"], "bob and frank are under the thresholds"

        (alice,) = sink.to("alice@example.org")
        assert alice["To"] == "alice@example.org" and alice["From"] == "gpuscope@example.org"
        assert alice["Subject"] == f"GPUs your jobs held idle, week of {seeded.week}"
        body = alice.get_content()
        assert "job j1 (partition p1): 1 of 1 GPUs idle for 1.2 h; 1.2 of 2.0 GPU-hours idle this week" in body
        assert "1.2 of 2.0 GPU-hours allocated (58 %)" in body and "opt you out" in body

        (gina,) = sink.to("gina@example.org")
        lines = gina.get_content().splitlines()
        assert "  job g1 (partition p1): 1.5 of 3.0 GPU-hours idle this week" in lines, (
            "no allocations: the week's figures"
        )
        assert "  job g2  Bcc: mallory@evil.example (partition p1): 0.5 of 1.0 GPU-hours idle this week" in lines
        for received in sink.received:
            assert received.message["Bcc"] is None and len(received.recipients) == 1

        again = send_digest(conn, seeded.week, settings, now + timedelta(hours=1), RATES)
        assert again.done_before and not again.email, "a finished week is not sent again"
        # The next week's digest, 3 days on (the same jobs fall in it): the rate limit of 1 a week holds...
        later = send_digest(conn, seeded.week + timedelta(days=1), settings, now + timedelta(days=3), RATES)
        assert later.email["skipped: rate limit"] == 2 and not later.email["sent"]
        assert len(sink.received) == 2
        # ... and lets them through once a week has passed
        week_on = send_digest(conn, seeded.week + timedelta(days=2), settings, now + timedelta(days=7, hours=1), RATES)
        assert week_on.email["sent"] == 2 and len(sink.received) == 4


def test_the_chat_summary_per_account_has_the_right_figures(seeded: Seeded, chat: ChatReceiver, tmp_path: Path) -> None:
    settings = settings_with(
        tmp_path,
        chat=[
            {"kind": "webhook", "url": chat.url + "/hook"},
            {"kind": "slack", "url": chat.url + SECRET_PATH},
            {"kind": "discord", "url": chat.url + "/discord", "accounts": ["a1", "quiet"]},
        ],
    )
    with psycopg.connect(seeded.dsn, autocommit=True) as conn:
        result = send_digest(conn, seeded.week, settings, _now(seeded), RATES)
        expected = usage_report(conn, week_range(seeded.week), "account", RATES)
    assert result.finished and result.chat["sent"] == 3 + 3 + 2

    hooks = {r.body["account"]: r.body for r in chat.at("/hook")}
    assert set(hooks) == {"a1", "a2", HOSTILE_ACCOUNT}
    a1 = hooks["a1"]
    assert math.isclose(a1["figures"]["gpu_hours_allocated"], 2.0 + 4.0 + 3.0 + 1.0)
    assert math.isclose(a1["figures"]["gpu_hours_idle"], 70 / 60 + 3.0 + 1.5 + 0.5)
    assert math.isclose(a1["figures"]["cost"], 2.0 * 10.0) and a1["currency"] == "EUR"
    assert a1["jobs"] == 4 and a1["week_start"] == seeded.week.isoformat()
    assert [u["user"] for u in a1["top_users"]] == ["carol", "gina", "alice"]
    for row in expected.rows:
        assert hooks[row.key]["figures"] == row.figures.as_json(), "the usage report's figures"
    assert "GPU-hours held idle: 6.2 (62 %)" in a1["text"] and "Cost: 20.00 EUR" in a1["text"]

    discord = {r.body["embeds"][0]["title"].split(",")[0]: r.body for r in chat.at("/discord")}
    assert set(discord) == {"GPU usage of a1", "GPU usage of quiet"}
    assert discord["GPU usage of quiet"]["embeds"][0]["fields"] == [
        {"name": "GPU-hours", "value": "none this week", "inline": True}
    ], "an account listed that ran nothing says so"
    facts = {f["name"]: f["value"] for f in discord["GPU usage of a1"]["embeds"][0]["fields"]}
    assert facts["GPU-hours allocated"] == "10.0" and facts["CO2"].endswith("kg")

    slack = [r.body for r in chat.at(SECRET_PATH)]
    (hostile,) = [b for b in slack if "evil" in b["text"]]
    headline = hostile["blocks"][0]["text"]["text"]
    assert "\n" not in headline and "<!here>" not in headline and "&lt;!here&gt;" in headline
    assert "<users/all>" not in str(hostile) and "<http" not in str(hostile)


def test_hostile_names_do_not_act_as_markup_in_any_chat(seeded: Seeded, chat: ChatReceiver, tmp_path: Path) -> None:
    kinds = ["slack", "teams", "discord", "mattermost", "googlechat"]
    settings = settings_with(tmp_path, chat=[{"kind": k, "url": f"{chat.url}/{k}"} for k in kinds])
    with psycopg.connect(seeded.dsn, autocommit=True) as conn:
        assert send_digest(conn, seeded.week, settings, _now(seeded), RATES).chat["sent"] == 5 * 3
    for kind in kinds:
        (body,) = [r.body for r in chat.at(f"/{kind}") if "evil" in str(r.body)]
        text = json.dumps(body, ensure_ascii=False)
        assert "<!here>" not in text and "<users/all>" not in text, kind
        assert "](http" not in text or kind == "slack", kind  # Slack's mrkdwn has no [text](url) links
        # Discord and Mattermost mention on @everyone; Slack, Teams and Google Chat do not (not from text)
        assert f"@{ZWSP}everyone" in text or kind in ("slack", "teams", "googlechat"), kind
        headline = json.dumps(body).split("GPU usage of ")[1].split(", 20")[0]
        assert "\\n" not in headline and "\\r" not in headline, (kind, headline)


def test_failures_are_retried_next_cycle_and_stop_nothing_else(
    seeded: Seeded, smtp: tuple[SmtpSink, int], chat: ChatReceiver, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sink, port = smtp
    sink.script["gina@example.org"] = ["451 try again later"]
    chat.script(SECRET_PATH, Reply(500, body="down"), Reply(200))
    settings = settings_with(
        tmp_path,
        chat=[
            {"kind": "slack", "url": chat.url + SECRET_PATH, "accounts": ["a1"]},
            {"kind": "webhook", "url": "http://127.0.0.1:9/hooks/n0b0dyH0m3T0k3n", "name": "gone"},
            {"kind": "webhook", "url": chat.url + "/fine", "accounts": ["a1", "a2"]},
        ],
        smtp_port=port,
    )
    twice = dataclasses.replace(settings, max_attempts=2)
    now = _now(seeded)
    caplog.set_level(logging.INFO, logger="gpuscope")
    with psycopg.connect(seeded.dsn, autocommit=True) as conn:
        first = send_digest(conn, seeded.week, twice, now)
        assert not first.finished
        assert first.chat == {"sent": 2, "retry": 1 + 3}, "the slack 500, and all three for the unreachable one"
        assert first.email == {"sent": 1, "retry": 1, "skipped: opted out": 2, "skipped: no address": 1}
        assert sink.recipients == ["alice@example.org"]
        assert len(chat.at("/fine")) == 2

        second = send_digest(conn, seeded.week, twice, now)
        assert second.finished, "the unreachable one is given up after max_attempts"
        assert second.chat == {"sent": 1, "failed": 3} and second.email["sent"] == 1
        assert sink.recipients == ["alice@example.org", "gina@example.org"]
        assert len(chat.at(SECRET_PATH)) == 2 and len(chat.at("/fine")) == 2, "what was sent is not sent again"
        rows = conn.execute("SELECT target || '/' || account, state FROM report_chat_log").fetchall()
        states: dict[str, str] = dict(rows)
    assert states["gone/a1"] == "failed" and states["slack-0/a1"] == "sent"
    assert "s3cr3tW3bh00kT0k3n" not in caplog.text and "n0b0dyH0m3T0k3n" not in caplog.text
    assert "HTTP 500: down" in caplog.text and "451" in caplog.text


def test_emails_over_a_cycles_cap_wait_for_the_next_cycle(
    seeded: Seeded, smtp: tuple[SmtpSink, int], tmp_path: Path
) -> None:
    sink, port = smtp
    settings = settings_with(tmp_path, smtp_port=port, max_emails_per_run=1)
    with psycopg.connect(seeded.dsn, autocommit=True) as conn:
        first = send_digest(conn, seeded.week, settings, _now(seeded), RATES)
        assert (first.email["sent"], first.email["later"], first.finished) == (1, 1, False)
        assert sink.recipients == ["gina@example.org"], "the most idle GPU-hours first"
        second = send_digest(conn, seeded.week, settings, _now(seeded) + timedelta(minutes=10), RATES)
        assert (second.email["sent"], second.email["later"], second.finished) == (1, 0, True)
    assert sink.recipients == ["alice@example.org", "gina@example.org"]
