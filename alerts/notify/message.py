"""What a notification says, independent of the chat service it goes to (stored in the outbox as JSON)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuscope.alerts.notify.escape import Escape, plain
from gpuscope.core.severity import RESOLVED_COLOUR, SEVERITY_COLOURS, UNKNOWN_COLOUR


@dataclass(frozen=True)
class Alert:
    status: str  # firing | resolved
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: str  # RFC 3339
    ends_at: str | None
    fingerprint: str
    generator_url: str
    value: float | None = None

    @property
    def title(self) -> str:
        return self.annotations.get("summary") or self.labels.get("alertname", "alert")

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status, "labels": self.labels, "annotations": self.annotations,
            "startsAt": self.starts_at, "endsAt": self.ends_at, "fingerprint": self.fingerprint,
            "generatorURL": self.generator_url, "value": self.value,
        }  # fmt: skip

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Alert:
        return cls(
            doc["status"], doc["labels"], doc["annotations"], doc["startsAt"], doc.get("endsAt"),
            doc["fingerprint"], doc.get("generatorURL", ""), doc.get("value"),
        )  # fmt: skip


@dataclass(frozen=True)
class Message:
    receiver: str
    group_key: str
    group_labels: dict[str, str]
    alerts: tuple[Alert, ...]
    external_url: str

    @property
    def firing(self) -> list[Alert]:
        return [a for a in self.alerts if a.status == "firing"]

    @property
    def resolved(self) -> list[Alert]:
        return [a for a in self.alerts if a.status == "resolved"]

    @property
    def status(self) -> str:
        return "firing" if self.firing else "resolved"

    @property
    def common_labels(self) -> dict[str, str]:
        return _common([a.labels for a in self.alerts])

    @property
    def common_annotations(self) -> dict[str, str]:
        return _common([a.annotations for a in self.alerts])

    @property
    def severity(self) -> str:
        """The worst severity among firing alerts ('' when none says)."""
        order = ["critical", "error", "warning", "info"]
        found = {a.labels.get("severity", "") for a in self.firing}
        return next((s for s in order if s in found), next(iter(sorted(found)), ""))

    @property
    def colour(self) -> int:
        if self.status == "resolved":
            return RESOLVED_COLOUR
        return SEVERITY_COLOURS.get(self.severity, UNKNOWN_COLOUR)

    @property
    def headline(self) -> str:
        return self.headline_in(plain)

    def headline_in(self, escape: Escape) -> str:
        """The headline with the alert names and the severity (label values) escaped for a chat service."""
        name = self.common_labels.get("alertname") or ", ".join(
            sorted({a.labels.get("alertname", "") for a in self.alerts})
        )
        if self.status == "resolved":
            return f"[RESOLVED] {escape(name)}"
        extra = f", {len(self.resolved)} resolved" if self.resolved else ""
        severity = f" {escape(self.severity.upper())}" if self.severity else ""
        return f"[FIRING:{len(self.firing)}{extra}]{severity} {escape(name)}"

    def to_json(self) -> dict[str, Any]:
        return {"group_labels": self.group_labels, "alerts": [a.to_json() for a in self.alerts]}

    @classmethod
    def from_json(cls, receiver: str, group_key: str, doc: dict[str, Any], external_url: str) -> Message:
        alerts = tuple(Alert.from_json(a) for a in doc["alerts"])
        return cls(receiver, group_key, doc["group_labels"], alerts, external_url)


def alert_lines(alert: Alert, escape: Escape = plain) -> str:
    """One alert as a few lines of text: what, where, since when; the labels and annotations escaped
    for the chat service (escape.py), our own words and times as they are."""
    where = ", ".join(
        f"{escape(k)}={escape(v)}" for k, v in sorted(alert.labels.items()) if k not in ("alertname", "severity")
    )
    lines = [escape(alert.title)]
    if alert.annotations.get("description"):
        lines.append(escape(alert.annotations["description"]))
    lines.append(f"{where}" if where else "")
    lines.append(f"since {alert.starts_at}" + (f", resolved {alert.ends_at}" if alert.status == "resolved" else ""))
    return "\n".join(line for line in lines if line)


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _common(maps: list[dict[str, str]]) -> dict[str, str]:
    if not maps:
        return {}
    common = dict(maps[0])
    for m in maps[1:]:
        common = {k: v for k, v in common.items() if m.get(k) == v}
    return common
