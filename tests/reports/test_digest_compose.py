"""The waste email and the chat summary as composed, before anything is sent: hostile names (line breaks,
header injection, markup) stay text on their line; the job lines read as the site expects."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime

import pytest

from gpuscope.alerts.notify import DIGEST_KINDS
from gpuscope.collector.query.usage import Figures
from gpuscope.reports.digest.settings import digest_settings_from
from gpuscope.reports.digest.summary import AccountSummary, UserUsage
from gpuscope.reports.digest.waste import JobWaste, UserWaste
from gpuscope.reports.digest.waste_email import job_line, waste_email

WEEK = date(2025, 3, 3)
HOSTILE = "bob\r\nBcc: x@y\u2028<b>*hi*</b>"


def _figures(allocated: float, idle: float, cost: float | None) -> Figures:
    return Figures(allocated, allocated, allocated - idle, 0.0, idle, 10.0, cost, 4.0, 0.0, "sm_active", 1.0)


def test_job_lines_say_how_many_gpus_were_idle_and_for_how_long() -> None:
    four_of_eight = JobWaste("4711", "gpu", 24.0, 12.0, 8, 4, (3.0, 3.0))
    assert job_line(four_of_eight) == (
        "job 4711 (partition gpu): 4 of 8 GPUs idle for 3.0 h; 12.0 of 24.0 GPU-hours idle this week"
    )
    uneven = JobWaste("4712", None, 8.0, 3.0, 2, 2, (1.0, 2.0))
    assert job_line(uneven) == "job 4712: 2 of 2 GPUs idle for 1.0 to 2.0 h; 3.0 of 8.0 GPU-hours idle this week"


def test_a_hostile_name_injects_no_header_nor_line_into_the_email() -> None:
    mail = digest_settings_from({"email": {"smtp_host": "h", "from": "gpuscope@example.org", "domain": "e.org"}}).email
    assert mail is not None
    job = JobWaste(HOSTILE, HOSTILE, 4.0, 3.0, None, None, None)
    waste = UserWaste(HOSTILE, 4.0, 3.0, (job,), 0)
    message = waste_email(waste, "bob@e.org", WEEK, mail, datetime(2025, 3, 10, 8, tzinfo=UTC))
    assert message["Bcc"] is None
    assert sorted(message.keys()) == sorted(
        ["Subject", "From", "To", "Date", "Message-ID", "Auto-Submitted", "Content-Type",
         "Content-Transfer-Encoding", "MIME-Version"]
    )  # fmt: skip
    raw = message.as_bytes()
    assert b"\nBcc:" not in raw and b"\rBcc:" not in raw
    body = message.get_content()
    assert "Hello bob  Bcc: x@y <b>*hi*</b>," in body.splitlines()
    assert all(not line.startswith("Bcc") for line in body.splitlines())


@pytest.mark.parametrize("kind", sorted(DIGEST_KINDS))
def test_every_chat_kind_keeps_a_hostile_account_on_its_line(kind: str) -> None:
    summary = AccountSummary(HOSTILE, WEEK, _figures(10.0, 2.5, None), 3, None, (UserUsage(HOSTILE, 10.0, 2.5),))
    body = DIGEST_KINDS[kind](summary)
    if kind == "webhook":  # for programs: the names as they are, in JSON; the text for people, one line each
        assert body["account"] == HOSTILE and body["figures"]["cost"] is None
        body = {"text": body["text"]}
    text = json.dumps(body, ensure_ascii=False)
    assert "\\r" not in text and "\u2028" not in text, "no line breaks of the name's own"
    assert "bob  Bcc: x@" in text and "no price configured" in text and "25 %" in text
