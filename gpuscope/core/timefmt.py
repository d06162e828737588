"""Time as the outside world reads it: RFC 3339 in UTC with a Z (Alertmanager, chat services, the API)."""

from __future__ import annotations

import datetime as dt


def rfc3339(t: dt.datetime) -> str:
    """UTC with a Z, as Alertmanager and the chat services write times."""
    return t.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
