"""Discord webhook: content (<= 2,000 characters) and up to 10 embeds within Discord's limits.

Labels and annotations go through escape.discord (markdown characters backslash-escaped, @ mentions
broken by a zero-width space), and allowed_mentions {"parse": []} keeps any mention from pinging.
"""

from __future__ import annotations

from typing import Any

from gpuscope.alerts.notify import escape
from gpuscope.alerts.notify.message import Message, truncate
from gpuscope.core.severity import RESOLVED_COLOUR, SEVERITY_COLOURS, UNKNOWN_COLOUR

MAX_EMBEDS = 10


def build(message: Message) -> dict[str, Any]:
    esc = escape.discord
    embeds = []
    for alert in message.alerts[:MAX_EMBEDS]:
        if alert.status == "resolved":
            colour = RESOLVED_COLOUR
        else:
            colour = SEVERITY_COLOURS.get(alert.labels.get("severity", ""), UNKNOWN_COLOUR)
        fields = [
            {"name": truncate(esc(k), 256), "value": truncate(esc(v) or "-", 1024), "inline": True}
            for k, v in sorted(alert.labels.items())
            if k != "alertname"
        ][:25]
        embeds.append(
            {
                "title": truncate(f"[{alert.status.upper()}] {esc(alert.title)}", 256),
                "description": truncate(esc(alert.annotations.get("description", "")), 4096),
                "color": colour,
                "fields": fields,
                "timestamp": alert.ends_at if alert.status == "resolved" and alert.ends_at else alert.starts_at,
            }
        )
    content = message.headline_in(esc)
    if len(message.alerts) > MAX_EMBEDS:
        content += f" ({len(message.alerts) - MAX_EMBEDS} more not shown)"
    return {"content": truncate(content, 2000), "embeds": embeds, "allowed_mentions": {"parse": []}}
