"""Forwarding to an existing Alertmanager: POST /api/v2/alerts with the alerts as a list.

Alertmanager resolves an alert by itself once its endsAt passes, so firing alerts are sent with an
endsAt a few minutes ahead and must be re-sent before then: give such a receiver a short
repeat_interval (the default for this kind is 1m; see docs/alerts.md). No digest: Alertmanager takes
alerts only.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from gpuscope.alerts.notify.message import Message
from gpuscope.core.timefmt import rfc3339

PATH = "/api/v2/alerts"
FIRING_HOLD = dt.timedelta(minutes=5)


def alert(message: Message) -> list[dict[str, Any]]:
    hold = rfc3339(dt.datetime.now(dt.UTC) + FIRING_HOLD)
    return [
        {
            "labels": a.labels,
            "annotations": a.annotations,
            "startsAt": a.starts_at,
            "endsAt": a.ends_at if a.status == "resolved" and a.ends_at else hold,
            "generatorURL": a.generator_url,
        }
        for a in message.alerts
    ]


def target(url: str) -> str:
    """The receiver URL may be Alertmanager's base URL or the full API path (a query, e.g. a proxy's
    token, stays at the end)."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    return urlunsplit(parts._replace(path=path if path.endswith(PATH) else path + PATH))
