"""Generic webhook: Alertmanager's webhook payload, version 4, so existing receivers work unchanged."""

from __future__ import annotations

from typing import Any

from gpuscope.alerts.notify.message import Message

ZERO_TIME = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt for alerts still firing


def build(message: Message) -> dict[str, Any]:
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
