"""Slack incoming webhook: a fallback text, Block Kit blocks, and an attachment for the severity colour."""

from __future__ import annotations

from typing import Any

from gpuscope.alerts.notify.message import Message, alert_lines, truncate

MAX_ALERTS = 10  # blocks per message are limited (50); more alerts are counted, not listed
SECTION_TEXT = 3000


def build(message: Message) -> dict[str, Any]:
    shown = message.alerts[:MAX_ALERTS]
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": truncate(message.headline, 150)}}
    ]
    for alert in shown:
        mark = ":white_check_mark:" if alert.status == "resolved" else ":rotating_light:"
        blocks.append(
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": truncate(f"{mark} {alert_lines(alert)}", SECTION_TEXT)},
            }
        )
    if len(message.alerts) > len(shown):
        more = len(message.alerts) - len(shown)
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"and {more} more"}]})
    blocks.append(
        {"type": "context", "elements": [{"type": "mrkdwn", "text": f"<{message.external_url}|open gpuscope>"}]}
    )
    fields = [{"title": k, "value": v, "short": True} for k, v in sorted(message.group_labels.items())]
    return {
        "text": message.headline,
        "blocks": blocks,
        "attachments": [
            {
                "color": f"#{message.colour:06x}",
                "title": message.headline,
                "text": truncate("\n\n".join(alert_lines(a) for a in shown), SECTION_TEXT),
                "fields": fields,
            }
        ],
    }
