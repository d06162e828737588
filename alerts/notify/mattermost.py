"""Mattermost incoming webhook: Slack-compatible text and attachments (no Block Kit)."""

from __future__ import annotations

from typing import Any

from gpuscope.alerts.notify import slack
from gpuscope.alerts.notify.message import Message


def build(message: Message) -> dict[str, Any]:
    body = slack.build(message)
    return {"text": body["text"], "attachments": body["attachments"]}
