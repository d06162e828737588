"""Payloads for each kind of receiver: build(message) -> the JSON body to POST."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuscope.alerts.notify import alertmanager, discord, googlechat, mattermost, slack, teams, webhook
from gpuscope.alerts.notify.message import Message

KINDS: dict[str, Callable[[Message], Any]] = {
    "slack": slack.build,
    "teams": teams.build,
    "discord": discord.build,
    "mattermost": mattermost.build,
    "googlechat": googlechat.build,
    "webhook": webhook.build,
    "alertmanager": alertmanager.build,
}


def target_url(kind: str, url: str) -> str:
    return alertmanager.target(url) if kind == "alertmanager" else url
