"""One module per chat service for both of its messages (issue 39): each kind's alert notification and
weekly digest are built by that kind's module in alerts/notify, in the same envelope, and go through the
same poster (alerts/notify/post.py) to a real HTTP receiver: asynchronously for the alerts' outbox, from
synchronous code through BlockingPoster for the digest, each answer judged the same way."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpuscope.alerts.notify import DIGEST_KINDS, KINDS
from gpuscope.alerts.notify.message import Alert, Message
from gpuscope.alerts.notify.post import BlockingPoster, Outcome, post
from gpuscope.collector.query.usage import Figures
from gpuscope.reports.digest.settings import DigestConfigError
from gpuscope.reports.digest.summary import AccountSummary, UserUsage
from tests.alerts.receiver import ChatReceiver, Reply
from tests.reports.digest_helpers import settings_with

SECRET = "/services/T0001/B0001/s3cr3tW3bh00kT0k3n"


def message() -> Message:
    labels = {"alertname": "GpuOverTemperature", "severity": "critical", "node": "gpu-node-01", "gpu": "3"}
    alert = Alert("firing", labels, {"summary": "GPU 3 is at 91 °C"}, "2026-03-02T08:00:00Z", None, "f1", "")
    return Message("ops", "{}:{node=gpu-node-01}", {"node": "gpu-node-01"}, (alert,), "https://gpuscope.example.org")


def summary() -> AccountSummary:
    figures = Figures(10.0, 10.0, 7.5, 0.0, 2.5, 10.0, 20.0, 4.0, 0.0, "sm_active", 1.0)
    return AccountSummary("a1", date(2026, 3, 2), figures, 3, "EUR", (UserUsage("alice", 10.0, 2.5),))


def envelope(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """The body less what the message says: what a kind's module writes once for both messages."""
    if kind == "teams":
        (attachment,) = body["attachments"]
        card = {k: v for k, v in attachment["content"].items() if k not in ("body", "actions")}
        return {**body, "attachments": [{**attachment, "content": card}]}
    said = {"slack": ("text", "blocks", "attachments"), "discord": ("content", "embeds"),
            "mattermost": ("text", "attachments"), "googlechat": ("text",)}[kind]  # fmt: skip
    return {k: v for k, v in body.items() if k not in said}


@pytest.fixture
def receiver() -> Iterator[ChatReceiver]:
    with ChatReceiver() as running:
        yield running


def test_each_chat_kind_builds_its_alert_and_its_digest_in_one_module(tmp_path: Path) -> None:
    assert set(KINDS) - set(DIGEST_KINDS) == {"alertmanager"}, "Alertmanager takes alerts only"
    chat = [{"kind": kind, "url": "https://chat.example.org/hook"} for kind in DIGEST_KINDS]
    assert {t.kind for t in settings_with(tmp_path, chat=chat).chat} == set(DIGEST_KINDS), "the digest takes each"
    with pytest.raises(DigestConfigError):
        settings_with(tmp_path, chat=[{"kind": "alertmanager", "url": "https://am.example.org"}])
    for kind in DIGEST_KINDS:
        module = f"gpuscope.alerts.notify.{kind}"
        assert (KINDS[kind].__module__, DIGEST_KINDS[kind].__module__) == (module, module), kind


@pytest.mark.parametrize("kind", sorted(set(DIGEST_KINDS) - {"webhook"}))
def test_a_chat_kinds_alert_and_digest_share_its_envelope(kind: str) -> None:
    alert_body, digest_body = KINDS[kind](message()), DIGEST_KINDS[kind](summary())
    assert envelope(kind, alert_body) == envelope(kind, digest_body)


@pytest.mark.parametrize("kind", sorted(DIGEST_KINDS))
def test_both_messages_go_through_the_one_poster_to_a_real_receiver(kind: str, receiver: ChatReceiver) -> None:
    alert_body, digest_body = KINDS[kind](message()), DIGEST_KINDS[kind](summary())

    async def send_alert() -> Outcome:
        async with httpx.AsyncClient() as client:
            return await post(client, kind, f"{receiver.url}/alert{SECRET}", alert_body)

    assert asyncio.run(send_alert()).result == "sent"
    with BlockingPoster() as poster:
        assert poster.post(kind, f"{receiver.url}/digest{SECRET}", digest_body).result == "sent"

    (alert,), (digest,) = receiver.at(f"/alert{SECRET}"), receiver.at(f"/digest{SECRET}")
    assert (alert.body, digest.body) == (alert_body, digest_body), "what the module built is what went"
    assert alert.content_type == digest.content_type == "application/json"


def test_the_digest_posts_are_judged_as_the_alerts_are(receiver: ChatReceiver) -> None:
    urls = {
        "sent": receiver.script("/ok", Reply(204, body="")),
        "limited": receiver.script("/limited", Reply(429, {"Retry-After": "7"}, "slow down")),
        "down": receiver.script("/down", Reply(503, body="maintenance")),
        "rejected": receiver.script("/rejected", Reply(400, body="invalid_blocks")),
    }
    with BlockingPoster() as poster:
        outcomes = {name: poster.post("slack", url, {"text": "x"}) for name, url in urls.items()}
        unreachable = poster.post("slack", f"http://127.0.0.1:9{SECRET}", {"text": "x"})  # port 9: discard, closed
    assert outcomes["sent"] == Outcome("sent", 204, "HTTP 204")
    assert outcomes["limited"] == Outcome("retry", 429, "HTTP 429: slow down", 7.0)
    assert outcomes["down"] == Outcome("retry", 503, "HTTP 503: maintenance")
    assert outcomes["rejected"] == Outcome("failed", 400, "HTTP 400: invalid_blocks")
    assert unreachable.result == "retry" and unreachable.http_status is None
    assert "s3cr3t" not in unreachable.detail and "T0001" not in unreachable.detail, unreachable.detail


def test_the_digest_posts_from_the_schedulers_worker_thread(receiver: ChatReceiver) -> None:
    """The digest loop runs its cycle with asyncio.to_thread beside the collector's own event loop."""

    def cycle() -> Outcome:
        with BlockingPoster() as poster:
            return poster.post("webhook", receiver.url + "/digest", DIGEST_KINDS["webhook"](summary()))

    async def scheduler() -> Outcome:
        return await asyncio.to_thread(cycle)

    assert asyncio.run(scheduler()).result == "sent"
    assert receiver.at("/digest")[0].body["kind"] == "gpuscope.usage_digest"
