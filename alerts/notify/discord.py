"""Discord webhook: content (<= 2,000 characters) and embeds within Discord's limits; an alert message
has one embed per alert (up to 10), a digest one embed with the account's figures as fields.

Labels, annotations, account and user names go through escape.discord (markdown characters
backslash-escaped, @ mentions broken by a zero-width space), and allowed_mentions {"parse": []} keeps
any mention from pinging.
"""

from __future__ import annotations

from typing import Any

from gpuscope.alerts.notify import escape
from gpuscope.alerts.notify.digest import TOP_USERS_TITLE, DigestSummary
from gpuscope.alerts.notify.message import Message, truncate
from gpuscope.core.severity import RESOLVED_COLOUR, SEVERITY_COLOURS, UNKNOWN_COLOUR

# Discord's limits
MAX_EMBEDS = 10
MAX_FIELDS = 25
CONTENT = 2000
TITLE = 256
DESCRIPTION = 4096
FIELD_NAME = 256
FIELD_VALUE = 1024


def alert(message: Message) -> dict[str, Any]:
    esc = escape.discord
    embeds = []
    for one in message.alerts[:MAX_EMBEDS]:
        if one.status == "resolved":
            colour = RESOLVED_COLOUR
        else:
            colour = SEVERITY_COLOURS.get(one.labels.get("severity", ""), UNKNOWN_COLOUR)
        fields = [
            _field(truncate(esc(k), FIELD_NAME), truncate(esc(v) or "-", FIELD_VALUE))
            for k, v in sorted(one.labels.items())
            if k != "alertname"
        ]
        embeds.append(
            {
                "title": truncate(f"[{one.status.upper()}] {esc(one.title)}", TITLE),
                "description": truncate(esc(one.annotations.get("description", "")), DESCRIPTION),
                "color": colour,
                "fields": fields[:MAX_FIELDS],
                "timestamp": one.ends_at if one.status == "resolved" and one.ends_at else one.starts_at,
            }
        )
    content = message.headline_in(esc)
    if len(message.alerts) > MAX_EMBEDS:
        content += f" ({len(message.alerts) - MAX_EMBEDS} more not shown)"
    return _message(content, embeds)


def digest(summary: DigestSummary) -> dict[str, Any]:
    esc = escape.discord
    fields = [_field(label, value) for label, value in summary.facts()]
    if summary.top_users:
        users = truncate("\n".join(summary.user_lines(esc)), FIELD_VALUE)
        fields.append(_field(TOP_USERS_TITLE, users, inline=False))
    embed = {"title": truncate(summary.headline(esc), TITLE), "fields": fields[:MAX_FIELDS]}
    return _message(summary.headline(esc), [embed])


def _field(name: str, value: str, inline: bool = True) -> dict[str, Any]:
    return {"name": name, "value": value, "inline": inline}


def _message(content: str, embeds: list[dict[str, Any]]) -> dict[str, Any]:
    """The envelope: the content within its limit, the embeds, and no mention that pings."""
    return {"content": truncate(content, CONTENT), "embeds": embeds, "allowed_mentions": {"parse": []}}
