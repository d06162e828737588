"""Microsoft Teams Workflows webhook: an Adaptive Card (the Office 365 connectors are retired), for an
alert and for a digest in the same envelope.

TextBlock and FactSet text is markdown (emphasis, lists, [text](url)): labels, annotations, account and
user names go through escape.teams.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuscope.alerts.notify import escape
from gpuscope.alerts.notify.digest import TOP_USERS_TITLE, DigestSummary
from gpuscope.alerts.notify.message import Message, alert_lines

MAX_ALERTS = 10
CARD_SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
CARD_VERSION = "1.2"  # both messages use nothing newer, so older Teams clients render them too
_STYLE = {"resolved": "good", "critical": "attention", "error": "attention", "warning": "warning"}


def alert(message: Message) -> dict[str, Any]:
    esc = escape.teams
    style = _STYLE.get("resolved" if message.status == "resolved" else message.severity, "accent")
    body = [_headline(message.headline_in(esc), colour=style)]
    if message.group_labels:
        body.append(_facts((esc(k), esc(v)) for k, v in sorted(message.group_labels.items())))
    for one in message.alerts[:MAX_ALERTS]:
        body.append({"type": "TextBlock", "text": alert_lines(one, esc), "wrap": True, "separator": True})
    if len(message.alerts) > MAX_ALERTS:
        body.append({"type": "TextBlock", "text": f"and {len(message.alerts) - MAX_ALERTS} more", "isSubtle": True})
    return _card(body, actions=[{"type": "Action.OpenUrl", "title": "Open gpuscope", "url": message.external_url}])


def digest(summary: DigestSummary) -> dict[str, Any]:
    esc = escape.teams
    body = [_headline(summary.headline(esc)), _facts(summary.facts())]
    if summary.top_users:
        lines = "\n".join(f"- {u}" for u in summary.user_lines(esc))
        body.append({"type": "TextBlock", "text": f"{TOP_USERS_TITLE}\n\n{lines}", "wrap": True})
    return _card(body)


def _headline(text: str, colour: str | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "TextBlock", "text": text, "weight": "Bolder", "size": "Medium"}
    if colour:
        block["color"] = colour
    return block | {"wrap": True}


def _facts(pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    return {"type": "FactSet", "facts": [{"title": title, "value": value} for title, value in pairs]}


def _card(body: list[dict[str, Any]], actions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The envelope: a message with the Adaptive Card as its one attachment."""
    card: dict[str, Any] = {"type": "AdaptiveCard", "$schema": CARD_SCHEMA, "version": CARD_VERSION, "body": body}
    if actions:
        card["actions"] = actions
    return {
        "type": "message",
        "attachments": [
            {"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None, "content": card}
        ],
    }
