"""The chat services and webhooks we post to, one module per kind: each builds that service's payloads,
`alert(message)` for an alert notification and `digest(summary)` for the weekly usage digest (all but
Alertmanager), with its envelope, escaping (escape.py) and size limits written once; post.py sends
either and judges the answer.

They live here, under the alerts, because reports (the digest) sits above alerts in the layers and may
import them, while the other way round is forbidden: alerts' outbox, its Message and its delivery are
their first user, and a neutral package under core would have to take the alert Message down with it.
What a digest must offer is a Protocol of its own (digest.py), so nothing here imports reports.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuscope.alerts.notify import alertmanager, discord, googlechat, mattermost, slack, teams, webhook
from gpuscope.alerts.notify.digest import DigestSummary
from gpuscope.alerts.notify.message import Message

# An alert receiver's kind -> its payload for a message (alerts/config.py validates kinds against it).
KINDS: dict[str, Callable[[Message], Any]] = {
    "slack": slack.alert,
    "teams": teams.alert,
    "discord": discord.alert,
    "mattermost": mattermost.alert,
    "googlechat": googlechat.alert,
    "webhook": webhook.alert,
    "alertmanager": alertmanager.alert,
}

# A digest chat entry's kind -> its payload for an account's week, from the same modules.
DIGEST_KINDS: dict[str, Callable[[DigestSummary], dict[str, Any]]] = {
    "slack": slack.digest,
    "teams": teams.digest,
    "discord": discord.digest,
    "mattermost": mattermost.digest,
    "googlechat": googlechat.digest,
    "webhook": webhook.digest,
}


def target_url(kind: str, url: str) -> str:
    return alertmanager.target(url) if kind == "alertmanager" else url
