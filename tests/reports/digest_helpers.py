"""What the digest tests share: a real SMTP server on 127.0.0.1 (aiosmtpd) that records what it is sent
and answers RCPT from a script, a week of usage with users over and under the waste thresholds (some with
hostile names), and the settings as a site writes them."""

from __future__ import annotations

import contextlib
import email
import email.policy
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import psycopg
from aiosmtpd.controller import Controller

from gpuscope.reports.digest.settings import DigestSettings, digest_settings_from
from tests.collector.test_usage import RATES, _base, _seed

__all__ = ["HOSTILE_ACCOUNT", "HOSTILE_USER", "RATES", "Seeded", "SmtpSink", "settings_with"]

H100 = "NVIDIA H100 80GB HBM3"  # priced at 2.0 a GPU-hour by RATES
HOSTILE_USER = "bob\r\nBcc: x@y"
HOSTILE_ACCOUNT = "ml\n*bold* <!here> @everyone [click](http://evil.example) <users/all>"
HOSTILE_JOB = "g2\r\nBcc: mallory@evil.example"
# Beside the seed of tests/collector/test_usage.py (alice: account a1, job j1, 2.0 GPU-hours of which
# 70 minutes idle; bob: account a2, jobs j2 and j3, 0.83 GPU-hours of which 0.5 idle), in its first hour:
# (job, user, account, partition, GPU-hours allocated, GPU-hours idle)
EXTRA_JOBS = [
    ("c1", "carol", "a1", "p1", 4.0, 3.0),  # over the thresholds, opted out in the configuration
    ("d1", "dave", "a2", "p1", 4.0, 3.0),  # over the thresholds, opted out through the table (API)
    ("g1", "gina", "a1", "p1", 3.0, 1.5),  # over the thresholds: an email listing both her jobs
    (HOSTILE_JOB, "gina", "a1", "p1", 1.0, 0.5),
    ("f1", "frank", "a2", "p2", 10.0, 1.5),  # idle 15 %: under min_idle_share
    ("h1", HOSTILE_USER, HOSTILE_ACCOUNT, "p1", 4.0, 3.0),  # over, but no address can be made of the name
]


@dataclass(frozen=True)
class Seeded:
    dsn: str
    base: datetime  # the seeded hours' start
    week: date  # a week (7 days from this date) that holds them


def seed_week(dsn: str) -> Seeded:
    base = _base()
    _seed(dsn, base)
    with psycopg.connect(dsn) as conn:
        for job, user, account, partition, allocated, idle in EXTRA_JOBS:
            conn.execute(
                "INSERT INTO usage_1h (bucket, job_id, model, username, account, partition, gpus, allocated_s,"
                " measured_s, active_s, active_sm_s, tensor_s, tensor_measured_s, idle_s, energy_j, energy_counter_s)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 0, 0, %s, %s, 0)",
                (base, job, H100, user, account, partition, allocated, allocated * 3600, allocated * 3600,
                 (allocated - idle) * 1800, allocated * 3600, idle * 3600, allocated * 3600 * 300),
            )  # fmt: skip
        conn.execute("INSERT INTO report_opt_out (username, since) VALUES ('dave', now())")
    return Seeded(dsn, base, base.date() - timedelta(days=3))


def settings_with(tmp_path: Path, chat: list[dict[str, Any]] | None = None, **email: Any) -> DigestSettings:
    """Settings as the YAML would give them: each chat entry's `url` goes to a url_file."""
    entries = []
    for i, entry in enumerate(chat or []):
        url_file = tmp_path / f"chat-url-{i}"
        url_file.write_text(entry.pop("url") + "\n")
        entries.append({**entry, "url_file": str(url_file)})
    raw: dict[str, Any] = {"chat": entries, "opt_out": ["carol"]}
    if email:
        raw["email"] = {"smtp_host": "127.0.0.1", "starttls": False, "from": "gpuscope@example.org",
                        "domain": "example.org", "min_idle_gpu_hours": 1.0, **email}  # fmt: skip
    return digest_settings_from(raw)


@dataclass(frozen=True)
class Received:
    recipients: list[str]
    message: EmailMessage


class SmtpSink:
    """aiosmtpd's handler: records each message with its envelope recipients; `script[address]` lists
    replies to give to RCPT TO that address, one per try (e.g. a 451 first), then it is accepted."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.script: dict[str, list[str]] = {}

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, options: Any) -> str:
        replies = self.script.get(address)
        if replies:
            return replies.pop(0)
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        self.received.append(Received(list(envelope.rcpt_tos), parsed))
        return "250 Message accepted"

    def to(self, address: str) -> list[EmailMessage]:
        return [r.message for r in self.received if address in r.recipients]

    @property
    def recipients(self) -> list[str]:
        return sorted(a for r in self.received for a in r.recipients)


@contextlib.contextmanager
def running_smtp() -> Iterator[tuple[SmtpSink, int]]:
    """A real SMTP server on 127.0.0.1, and its port."""
    sink = SmtpSink()
    with socket.socket() as probe:  # aiosmtpd checks it is up by connecting, so it needs a port number
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(sink, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield sink, port
    finally:
        controller.stop()
