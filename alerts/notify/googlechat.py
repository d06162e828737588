"""Google Chat incoming webhook: a text message (32,000 bytes at most).

Chat's markup (*bold*, _italic_, <url|text>, <users/all>) has no escape character: labels and
annotations go through escape.googlechat (zero-width spaces that keep them from forming markup).
"""

from __future__ import annotations

from typing import Any

from gpuscope.alerts.notify import escape
from gpuscope.alerts.notify.message import Message, alert_lines

MAX_BYTES = 32_000


def build(message: Message) -> dict[str, Any]:
    esc = escape.googlechat
    text = f"*{message.headline_in(esc)}*\n\n" + "\n\n".join(alert_lines(a, esc) for a in message.alerts)
    text += f"\n\n<{message.external_url}|open gpuscope>"
    encoded = text.encode()
    if len(encoded) > MAX_BYTES:
        text = encoded[: MAX_BYTES - 4].decode(errors="ignore") + " …"
    return {"text": text}
