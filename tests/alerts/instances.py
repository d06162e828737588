"""Alert instances, silences and a notification config as the decision and delivery tests build them."""

from __future__ import annotations

import datetime as dt
from typing import Any

from gpuscope.alerts.config import NotifyConfig, parse_notify_config
from gpuscope.alerts.evaluate import fingerprint
from gpuscope.alerts.matchers import parse_matcher
from gpuscope.alerts.silences import Silence
from gpuscope.alerts.state import Instance

T0 = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.UTC)


def config(receivers: list[dict[str, Any]] | None = None, **route: Any) -> NotifyConfig:
    doc: dict[str, Any] = {
        "route": {"receiver": "ops", "group_by": ["alertname"], "group_wait": "30s", "group_interval": "5m",
                  "repeat_interval": "4h", **route},
        "receivers": receivers or [
            {"name": "ops", "kind": "slack", "url": "http://127.0.0.1:9/ops"},
            {"name": "quiet", "kind": "webhook", "url": "http://127.0.0.1:9/quiet", "send_resolved": False},
            {"name": "pager", "kind": "webhook", "url": "http://127.0.0.1:9/pager"},
            {"name": "am", "kind": "alertmanager", "url": "http://127.0.0.1:9/am"},
        ],
        "inhibit_rules": [{"source_matchers": ["alertname=ExporterDown"],
                           "target_matchers": ["alertname!=ExporterDown"], "equal": ["node"]}],
    }  # fmt: skip
    return parse_notify_config(doc)


def alert(name: str, node: str, state: str = "firing", at: dt.datetime = T0, **labels: str) -> Instance:
    all_labels = {"alertname": name, "node": node, **labels}
    return Instance(
        fingerprint(all_labels), name, "g", all_labels, {"summary": f"{name} on {node}"}, 1.0, state, at,
        at if state != "pending" else None, at, at if state == "resolved" else None, at,
    )  # fmt: skip


def silence(*matchers: str, starts: float = -60, ends: float = 3600) -> Silence:
    """A silence from T0 + starts to T0 + ends (seconds)."""
    return Silence(
        1, tuple(parse_matcher(m) for m in matchers), T0 + dt.timedelta(seconds=starts),
        T0 + dt.timedelta(seconds=ends), "test", "", T0,
    )  # fmt: skip
