"""Slack incoming webhook: a fallback text, Block Kit blocks, and an attachment for the severity colour.

Every label and annotation goes through escape.slack (&, <, > as entities): a value cannot mention
(<!here>, <@U…>) nor link (<https://…|text>). Link previews are off, so a URL in a value is not fetched.
"""

from __future__ import annotations

from typing import Any

from gpuscope.alerts.notify import escape
from gpuscope.alerts.notify.escape import Escape
from gpuscope.alerts.notify.message import Message, alert_lines, truncate

MAX_ALERTS = 10  # blocks per message are limited (50); more alerts are counted, not listed
SECTION_TEXT = 3000


def build(message: Message) -> dict[str, Any]:
    esc = escape.slack
    shown = message.alerts[:MAX_ALERTS]
    headline = message.headline_in(esc)
    blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": truncate(headline, 150)}}]
    for alert in shown:
        mark = ":white_check_mark:" if alert.status == "resolved" else ":rotating_light:"
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": truncate(f"{mark} {alert_lines(alert, esc)}", SECTION_TEXT)},
            }
        )
    if len(message.alerts) > len(shown):
        more = len(message.alerts) - len(shown)
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"and {more} more"}]})
    blocks.append(
        {"type": "context", "elements": [{"type": "mrkdwn", "text": f"<{message.external_url}|open gpuscope>"}]}
    )
    return {
        "text": headline,
        "blocks": blocks,
        "attachments": attachments(message, esc),
        "unfurl_links": False,
        "unfurl_media": False,
    }


def attachments(message: Message, esc: Escape) -> list[dict[str, Any]]:
    """The legacy attachment (Slack's severity colour bar; Mattermost's whole message), values escaped by `esc`."""
    shown = message.alerts[:MAX_ALERTS]
    fields = [{"title": esc(k), "value": esc(v), "short": True} for k, v in sorted(message.group_labels.items())]
    return [
        {
            "color": f"#{message.colour:06x}",
            "title": message.headline_in(esc),
            "text": truncate("\n\n".join(alert_lines(a, esc) for a in shown), SECTION_TEXT),
            "fields": fields,
        }
    ]
