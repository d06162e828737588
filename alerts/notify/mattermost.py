"""Mattermost incoming webhook: Slack-compatible text and attachments (no Block Kit).

Mattermost renders markdown, turns Slack's <url|text> and <!channel> into links and mentions, and
mentions on @channel, @all, @here and @user: values go through escape.mattermost.
"""

from __future__ import annotations

from typing import Any

from gpuscope.alerts.notify import escape, slack
from gpuscope.alerts.notify.message import Message


def build(message: Message) -> dict[str, Any]:
    esc = escape.mattermost
    return {"text": message.headline_in(esc), "attachments": slack.attachments(message, esc)}
