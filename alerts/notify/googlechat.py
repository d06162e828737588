"""Google Chat incoming webhook: a text message (32,000 bytes at most), for an alert and for a digest.

Chat's markup (*bold*, _italic_, <url|text>, <users/all>) has no escape character: labels, annotations,
account and user names go through escape.googlechat (zero-width spaces that keep them from forming markup).
"""

from __future__ import annotations

from typing import Any

from gpuscope.alerts.notify import escape
from gpuscope.alerts.notify.digest import DigestSummary, markdown_text
from gpuscope.alerts.notify.message import Message, alert_lines

MAX_BYTES = 32_000


def alert(message: Message) -> dict[str, Any]:
    esc = escape.googlechat
    text = f"*{message.headline_in(esc)}*\n\n" + "\n\n".join(alert_lines(a, esc) for a in message.alerts)
    return _message(text + f"\n\n<{message.external_url}|open gpuscope>")


def digest(summary: DigestSummary) -> dict[str, Any]:
    return _message(markdown_text(summary, escape.googlechat))


def _message(text: str) -> dict[str, Any]:
    """The envelope: the text, cut to Chat's limit in bytes (not characters) on a character's boundary."""
    encoded = text.encode()
    if len(encoded) > MAX_BYTES:
        text = encoded[: MAX_BYTES - 4].decode(errors="ignore") + " …"
    return {"text": text}
