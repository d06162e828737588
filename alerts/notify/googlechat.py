"""Google Chat incoming webhook: a text message (32,000 bytes at most)."""

from __future__ import annotations

from typing import Any

from gpuscope.alerts.notify.message import Message, alert_lines

MAX_BYTES = 32_000


def build(message: Message) -> dict[str, Any]:
    text = f"*{message.headline}*\n\n" + "\n\n".join(alert_lines(a) for a in message.alerts)
    text += f"\n\n<{message.external_url}|open gpuscope>"
    encoded = text.encode()
    if len(encoded) > MAX_BYTES:
        text = encoded[: MAX_BYTES - 4].decode(errors="ignore") + " …"
    return {"text": text}
