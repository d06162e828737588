"""Mattermost incoming webhook: Slack-compatible text and attachments (no Block Kit). An alert message is
Slack's attachment (slack.attachments); a digest is one markdown text.

Mattermost renders markdown, turns Slack's <url|text> and <!channel> into links and mentions, and
mentions on @channel, @all, @here and @user: values go through escape.mattermost.
"""

from __future__ import annotations

from typing import Any

from gpuscope.alerts.notify import escape, slack
from gpuscope.alerts.notify.digest import DigestSummary, markdown_text
from gpuscope.alerts.notify.message import Message, truncate

MAX_TEXT = 16_000  # a post's text: Mattermost's limit is 16,383 characters


def alert(message: Message) -> dict[str, Any]:
    esc = escape.mattermost
    return {"text": message.headline_in(esc), "attachments": slack.attachments(message, esc)}


def digest(summary: DigestSummary) -> dict[str, Any]:
    return {"text": truncate(markdown_text(summary, escape.mattermost), MAX_TEXT)}
