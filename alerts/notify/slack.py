"""Slack incoming webhook: a fallback text, Block Kit blocks and, for an alert, an attachment for the
severity colour; for a digest, the account's figures as sections.

Every label, annotation, account and user name goes through escape.slack (&, <, > as entities): a value
cannot mention (<!here>, <@U…>) nor link (<https://…|text>). Link previews are off, so a URL in a value
is not fetched.
"""

from __future__ import annotations

from typing import Any

from gpuscope.alerts.notify import escape
from gpuscope.alerts.notify.digest import TOP_USERS_TITLE, DigestSummary
from gpuscope.alerts.notify.escape import Escape
from gpuscope.alerts.notify.message import Message, alert_lines, truncate

MAX_ALERTS = 10  # blocks per message are limited (50); more alerts are counted, not listed
HEADER_TEXT = 150  # Slack's limit for a header block's text
SECTION_TEXT = 3000  # Slack's limit for a section's text


def alert(message: Message) -> dict[str, Any]:
    esc = escape.slack
    shown = message.alerts[:MAX_ALERTS]
    headline = message.headline_in(esc)
    blocks = [_header(headline)]
    for one in shown:
        mark = ":white_check_mark:" if one.status == "resolved" else ":rotating_light:"
        blocks.append(_section(f"{mark} {alert_lines(one, esc)}"))
    if len(message.alerts) > len(shown):
        more = len(message.alerts) - len(shown)
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": f"and {more} more"}]})
    blocks.append(
        {"type": "context", "elements": [{"type": "mrkdwn", "text": f"<{message.external_url}|open gpuscope>"}]}
    )
    return _message(headline, blocks, colour_bar=attachments(message, esc))


def digest(summary: DigestSummary) -> dict[str, Any]:
    esc = escape.slack
    facts = "\n".join(f"*{label}:* {value}" for label, value in summary.facts())
    blocks = [_header(summary.headline(esc)), _section(facts)]
    if summary.top_users:
        blocks.append(_section(f"*{TOP_USERS_TITLE}*\n" + "\n".join(f"• {u}" for u in summary.user_lines(esc))))
    return _message(summary.headline(esc), blocks)


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


def _header(text: str) -> dict[str, Any]:
    return {"type": "header", "text": {"type": "plain_text", "text": truncate(text, HEADER_TEXT)}}


def _section(mrkdwn: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": truncate(mrkdwn, SECTION_TEXT)}}


def _message(text: str, blocks: list[dict[str, Any]], colour_bar: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The envelope: the fallback text, the blocks, the attachment if any, and link previews off."""
    body: dict[str, Any] = {"text": text, "blocks": blocks}
    if colour_bar is not None:
        body["attachments"] = colour_bar
    return body | {"unfurl_links": False, "unfurl_media": False}
