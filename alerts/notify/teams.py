"""Microsoft Teams Workflows webhook: an Adaptive Card (the Office 365 connectors are retired).

TextBlock and FactSet text is markdown (emphasis, lists, [text](url)): labels and annotations go
through escape.teams.
"""

from __future__ import annotations

from typing import Any

from gpuscope.alerts.notify import escape
from gpuscope.alerts.notify.message import Message, alert_lines

MAX_ALERTS = 10
_STYLE = {"resolved": "good", "critical": "attention", "error": "attention", "warning": "warning"}


def build(message: Message) -> dict[str, Any]:
    esc = escape.teams
    style = _STYLE.get("resolved" if message.status == "resolved" else message.severity, "accent")
    body: list[dict[str, Any]] = [
        {"type": "TextBlock", "text": message.headline_in(esc), "weight": "Bolder", "size": "Medium", "color": style,
         "wrap": True},
    ]  # fmt: skip
    if message.group_labels:
        body.append(
            {
                "type": "FactSet",
                "facts": [{"title": esc(k), "value": esc(v)} for k, v in sorted(message.group_labels.items())],
            }
        )
    for alert in message.alerts[:MAX_ALERTS]:
        body.append({"type": "TextBlock", "text": alert_lines(alert, esc), "wrap": True, "separator": True})
    if len(message.alerts) > MAX_ALERTS:
        body.append({"type": "TextBlock", "text": f"and {len(message.alerts) - MAX_ALERTS} more", "isSubtle": True})
    card = {
        "type": "AdaptiveCard",
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "version": "1.2",
        "body": body,
        "actions": [{"type": "Action.OpenUrl", "title": "Open gpuscope", "url": message.external_url}],
    }
    return {
        "type": "message",
        "attachments": [
            {"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None, "content": card}
        ],
    }
