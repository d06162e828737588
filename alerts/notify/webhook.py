"""Generic webhook, for programs: an alert message is Alertmanager's webhook payload, version 4, so
existing receivers work unchanged; a digest is its figures as the usage API writes them
(kind "gpuscope.usage_digest"), with the plain text for people. Nothing is escaped: it is JSON."""

from __future__ import annotations

from typing import Any

from gpuscope.alerts.notify.digest import DigestSummary
from gpuscope.alerts.notify.message import Message

ZERO_TIME = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt for alerts still firing
DIGEST_KIND = "gpuscope.usage_digest"


def alert(message: Message) -> dict[str, Any]:
    return {
        "version": "4",
        "groupKey": message.group_key,
        "truncatedAlerts": 0,
        "status": message.status,
        "receiver": message.receiver,
        "groupLabels": message.group_labels,
        "commonLabels": message.common_labels,
        "commonAnnotations": message.common_annotations,
        "externalURL": message.external_url,
        "alerts": [
            {
                "status": a.status,
                "labels": a.labels,
                "annotations": a.annotations,
                "startsAt": a.starts_at,
                "endsAt": a.ends_at or ZERO_TIME,
                "generatorURL": a.generator_url,
                "fingerprint": a.fingerprint,
            }
            for a in message.alerts
        ],
    }


def digest(summary: DigestSummary) -> dict[str, Any]:
    return {
        "kind": DIGEST_KIND,
        "week_start": summary.week_start.isoformat(),
        "account": summary.account,
        "currency": summary.currency,
        "jobs": summary.jobs,
        "figures": summary.figures.as_json() if summary.figures else None,
        "top_users": [
            {"user": u.user, "gpu_hours_allocated": u.gpu_hours_allocated, "gpu_hours_idle": u.gpu_hours_idle}
            for u in summary.top_users
        ],
        "text": summary.text(),
    }
