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
from typing import Annotated, Any

from pydantic import AfterValidator, Field, model_validator

from gpuscope.alerts.duration import parse_duration
from gpuscope.alerts.matchers import Matcher, all_match, matcher_from
from gpuscope.alerts.notify import KINDS
from gpuscope.core.config_file import ConfigProblem, FileModel, Key, checked, load_config_file, read_named_file


class ConfigError(ValueError):
    """A notification file gpuscope will not run with; the message names the file, line and key."""


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
    """The file at `path`; url_file paths are read beside it."""
    return load_config_file(Path(path), NotifyFile, ConfigError, lambda file: _config(file, Path(path).parent))


def parse_notify_config(doc: Any, base: Path = Path()) -> NotifyConfig:
    return checked(NotifyFile, doc, ConfigError, lambda file: _config(file, base))


def _seconds(value: Any) -> float:
    try:
        return parse_duration(value, "")
    except ValueError as exc:
        raise ValueError(str(exc).removeprefix(": ")) from None


def _known_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"must be one of {', '.join(KINDS)}, got {kind!r}")
    return kind


Duration = Annotated[Any, AfterValidator(_seconds)]  # "30s", "5m", "1h30m", as Prometheus writes them
Matchers = list[Annotated[Any, AfterValidator(matcher_from)]]  # 'name="value"', or {name, op, value}


class ReceiverFile(FileModel):
    name: Annotated[str, Field(min_length=1)]
    kind: Annotated[str, AfterValidator(_known_kind)]
    url: str | None = None  # exactly one of these three
    url_file: str | None = None
    url_env: str | None = None
    send_resolved: bool = True
    min_interval: Duration = 1.0

    @model_validator(mode="after")
    def _one_url(self) -> ReceiverFile:
        if [self.url, self.url_file, self.url_env].count(None) != 2:
            raise ValueError("give exactly one of url, url_file, url_env")
        return self


class RouteFile(FileModel):
    receiver: str | None = None  # None: the parent's
    matchers: Matchers | None = None
    group_by: list[str] | None = None
    group_wait: Duration | None = None
    group_interval: Duration | None = None
    repeat_interval: Duration | None = None
    continue_: bool = Field(False, alias="continue")
    routes: list[RouteFile] | None = None


class InhibitFile(FileModel):
    source_matchers: Matchers | None = None
    target_matchers: Matchers | None = None
    equal: list[str] | None = None

    @model_validator(mode="after")
    def _both_sides(self) -> InhibitFile:
        if not self.source_matchers or not self.target_matchers:
            raise ValueError("needs source_matchers and target_matchers")
        return self


class NotifyFile(FileModel):
    route: RouteFile
    receivers: list[ReceiverFile] | None = None
    inhibit_rules: list[InhibitFile] | None = None
    external_url: str = "http://127.0.0.1:8050"  # links in messages


def _config(file: NotifyFile, base: Path) -> NotifyConfig:
    receivers: dict[str, Receiver] = {}
    for i, raw in enumerate(file.receivers or ()):
        if raw.name in receivers:
            raise ConfigProblem(("receivers", i, "name"), f"the name {raw.name!r} is used twice")
        url = _url(raw, base, ("receivers", i))
        receivers[raw.name] = Receiver(raw.name, raw.kind, url, raw.send_resolved, raw.min_interval)
    if file.route.matchers:
        raise ConfigProblem(("route", "matchers"), "the top route takes every alert: it has no matchers")
    route = _route(file.route, None, receivers, ("route",), "0")
    inhibit = tuple(
        InhibitRule(tuple(rule.source_matchers or ()), tuple(rule.target_matchers or ()), tuple(rule.equal or ()))
        for rule in file.inhibit_rules or ()
    )
    return NotifyConfig(route, receivers, inhibit, file.external_url.rstrip("/"))


def _url(raw: ReceiverFile, base: Path, at: Key) -> str:
    """The receiver's URL, from where the file says it is kept."""
    if raw.url_file is not None:
        at = (*at, "url_file")
        url = read_named_file(base / raw.url_file, at).strip()
    elif raw.url_env is not None:
        url, at = os.environ.get(raw.url_env, ""), (*at, "url_env")
        if not url:
            raise ConfigProblem(at, f"environment variable {raw.url_env} is not set")
    else:
        url, at = raw.url or "", (*at, "url")
    if not url.startswith(("http://", "https://")):
        raise ConfigProblem(at, "the URL must start with http:// or https://")
    return url


def _route(raw: RouteFile, parent: Route | None, receivers: dict[str, Receiver], at: Key, path: str) -> Route:
    """The route and those under it; what a route leaves out it takes from its parent."""
    receiver = raw.receiver if raw.receiver is not None else parent.receiver if parent else None
    if receiver not in receivers:
        raise ConfigProblem((*at, "receiver"), f"receiver {receiver!r} is not defined under 'receivers'")
    default = Route(receiver=receiver)
    inherited = parent or default
    node = Route(
        receiver=receiver,
        matchers=tuple(raw.matchers or ()),
        group_by=tuple(raw.group_by) if raw.group_by is not None else inherited.group_by,
        group_wait_s=raw.group_wait if raw.group_wait is not None else inherited.group_wait_s,
        # An interval of 0 would send without pause: it stands for the default, as it always has.
        group_interval_s=_interval(raw.group_interval, inherited.group_interval_s, default.group_interval_s),
        repeat_interval_s=_interval(raw.repeat_interval, inherited.repeat_interval_s, default.repeat_interval_s),
        continue_=raw.continue_,
        path=path,
    )
    children = tuple(
        _route(child, node, receivers, (*at, "routes", i), f"{path}.{i}") for i, child in enumerate(raw.routes or ())
    )
    return Route(**{**node.__dict__, "routes": children})


def _interval(given: float | None, inherited: float, default: float) -> float:
    return inherited if given is None else given or default
