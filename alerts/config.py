"""The notification file, in the shape of Alertmanager's: a route tree, receivers, inhibition rules.

external_url: https://gpuscope.example.org      # links in messages
route:
  receiver: ops
  group_by: [alertname, cluster]
  group_wait: 30s
  group_interval: 5m
  repeat_interval: 4h
  routes:
    - matchers: ['severity="critical"']
      receiver: oncall
receivers:
  - name: ops
    kind: slack                      # slack teams discord mattermost googlechat webhook alertmanager
    url_file: /etc/gpuscope/ops-slack-url   # or url_env: NAME, or url: (kept out of logs either way)
    send_resolved: true
    min_interval: 1s                 # per-receiver rate limit
inhibit_rules:
  - source_matchers: ['alertname="ExporterDown"']
    target_matchers: ['alertname!="ExporterDown"']
    equal: [cluster, node]
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuscope.alerts.duration import parse_duration
from gpuscope.alerts.matchers import Matcher, all_match, matcher_from
from gpuscope.alerts.notify import KINDS


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Receiver:
    name: str
    kind: str
    url: str = field(repr=False)  # a secret: never in logs or reprs
    send_resolved: bool = True
    min_interval_s: float = 1.0


@dataclass(frozen=True)
class Route:
    receiver: str
    matchers: tuple[Matcher, ...] = ()
    group_by: tuple[str, ...] = ("alertname",)  # ("...",): every label, as in Alertmanager
    group_wait_s: float = 30.0
    group_interval_s: float = 300.0
    repeat_interval_s: float = 4 * 3600.0
    continue_: bool = False
    routes: tuple[Route, ...] = ()
    path: str = "0"  # position in the tree: part of the group key

    def match(self, labels: dict[str, str]) -> list[Route]:
        """The routes that take an alert with these labels, from this one down (this one matches)."""
        found: list[Route] = []
        for child in self.routes:
            if all_match(child.matchers, labels):
                found.extend(child.match(labels))
                if not child.continue_:
                    break
        return found or [self]


@dataclass(frozen=True)
class InhibitRule:
    source: tuple[Matcher, ...]
    target: tuple[Matcher, ...]
    equal: tuple[str, ...]


@dataclass(frozen=True)
class NotifyConfig:
    route: Route
    receivers: dict[str, Receiver]
    inhibit_rules: tuple[InhibitRule, ...] = ()
    external_url: str = "http://127.0.0.1:8050"


def load_notify_config(path: str | Path) -> NotifyConfig:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return parse_notify_config(yaml.safe_load(text), base=Path(path).parent)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def parse_notify_config(doc: Any, base: Path = Path()) -> NotifyConfig:
    if not isinstance(doc, dict):
        raise ConfigError("expected a mapping with 'route' and 'receivers'")
    _no_unknown(doc, {"route", "receivers", "inhibit_rules", "external_url"}, "top level")
    receivers = {}
    for i, raw in enumerate(_list(doc.get("receivers"), "receivers")):
        receiver = _receiver(raw, f"receivers[{i}]", base)
        if receiver.name in receivers:
            raise ConfigError(f"receivers[{i}]: the name {receiver.name!r} is used twice")
        receivers[receiver.name] = receiver
    if "route" not in doc:
        raise ConfigError("'route' is missing")
    route = _route(doc["route"], "route", None, receivers, "0")
    inhibit = tuple(_inhibit(raw, f"inhibit_rules[{i}]") for i, raw in enumerate(_list(doc.get("inhibit_rules"), "")))
    url = doc.get("external_url", "http://127.0.0.1:8050")
    if not isinstance(url, str):
        raise ConfigError("external_url must be a string")
    return NotifyConfig(route, receivers, inhibit, url.rstrip("/"))


def _receiver(raw: Any, where: str, base: Path) -> Receiver:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping")
    _no_unknown(raw, {"name", "kind", "url", "url_file", "url_env", "send_resolved", "min_interval"}, where)
    name, kind = raw.get("name"), raw.get("kind")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: 'name' is required")
    if kind not in KINDS:
        raise ConfigError(f"{where} ({name}): 'kind' must be one of {', '.join(KINDS)}, got {kind!r}")
    sources = [k for k in ("url", "url_file", "url_env") if k in raw]
    if len(sources) != 1:
        raise ConfigError(f"{where} ({name}): give exactly one of url, url_file, url_env")
    if "url_file" in raw:
        path = base / str(raw["url_file"])
        try:
            url = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"{where} ({name}): cannot read url_file {path}: {exc.strerror or exc}") from None
    elif "url_env" in raw:
        url = os.environ.get(str(raw["url_env"]), "")
        if not url:
            raise ConfigError(f"{where} ({name}): environment variable {raw['url_env']} is not set")
    else:
        url = str(raw["url"])
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"{where} ({name}): the URL must start with http:// or https://")
    send_resolved = raw.get("send_resolved", True)
    if not isinstance(send_resolved, bool):
        raise ConfigError(f"{where} ({name}): send_resolved must be true or false")
    try:
        min_interval = parse_duration(raw.get("min_interval", "1s"), f"{where} ({name}): min_interval")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return Receiver(name, kind, url, send_resolved, min_interval)


def _route(raw: Any, where: str, parent: Route | None, receivers: dict[str, Receiver], path: str) -> Route:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping")
    keys = {"receiver", "matchers", "group_by", "group_wait", "group_interval", "repeat_interval", "continue", "routes"}
    _no_unknown(raw, keys, where)
    receiver = raw.get("receiver", parent.receiver if parent else None)
    if receiver not in receivers:
        raise ConfigError(f"{where}: receiver {receiver!r} is not defined under 'receivers'")
    try:
        matchers = tuple(matcher_from(m) for m in _list(raw.get("matchers"), f"{where}: matchers"))
        if parent is None and matchers:
            raise ConfigError(f"{where}: the top route takes every alert: it has no matchers")
        timing = {
            key: parse_duration(raw[key], f"{where}: {key}") if key in raw else getattr(parent, f"{key}_s", None)
            for key in ("group_wait", "group_interval", "repeat_interval")
        }
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    group_by = raw.get("group_by", list(parent.group_by) if parent else ["alertname"])
    if not isinstance(group_by, list) or not all(isinstance(g, str) for g in group_by):
        raise ConfigError(f"{where}: group_by must be a list of label names (or ['...'] for all)")
    defaults = Route(receiver=str(receiver))
    node = Route(
        receiver=str(receiver),
        matchers=matchers,
        group_by=tuple(group_by),
        group_wait_s=timing["group_wait"] if timing["group_wait"] is not None else defaults.group_wait_s,
        group_interval_s=timing["group_interval"] or defaults.group_interval_s,
        repeat_interval_s=timing["repeat_interval"] or defaults.repeat_interval_s,
        continue_=bool(raw.get("continue", False)),
        path=path,
    )
    children = tuple(
        _route(child, f"{where}.routes[{i}]", node, receivers, f"{path}.{i}")
        for i, child in enumerate(_list(raw.get("routes"), f"{where}: routes"))
    )
    return Route(**{**node.__dict__, "routes": children})


def _inhibit(raw: Any, where: str) -> InhibitRule:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping")
    _no_unknown(raw, {"source_matchers", "target_matchers", "equal"}, where)
    try:
        source = tuple(matcher_from(m) for m in _list(raw.get("source_matchers"), f"{where}: source_matchers"))
        target = tuple(matcher_from(m) for m in _list(raw.get("target_matchers"), f"{where}: target_matchers"))
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if not source or not target:
        raise ConfigError(f"{where}: needs source_matchers and target_matchers")
    equal = _list(raw.get("equal"), f"{where}: equal")
    return InhibitRule(source, target, tuple(str(e) for e in equal))


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list")
    return value


def _no_unknown(raw: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = set(raw) - allowed
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)} (allowed: {', '.join(sorted(allowed))})")
