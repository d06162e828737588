"""Alert rule files in the shape of Prometheus rule files, with SQL where PromQL would be.

    groups:
      - name: gpu
        interval: 30s
        rules:
          - alert: GpuOverTemperature
            expr: SELECT cluster, node, gpu, uuid, temp_c AS value FROM gpu_latest WHERE temp_c >= 87
            for: 2m
            keep_firing_for: 1m
            labels: {severity: warning}
            annotations: {summary: "GPU {{ $labels.gpu }} on {{ $labels.node }} at {{ $value }} C"}

Each row the query returns is one alert instance: its columns other than `value` are its labels.
All problems in a file are reported together (RulesError.problems), each naming its group and rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from gpuscope.alerts.duration import parse_duration
from gpuscope.alerts.template import Template, compile_template

DEFAULT_INTERVAL_S = 30.0
_ALERT_NAME = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RULE_KEYS = {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}


class RulesError(ValueError):
    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


@dataclass(frozen=True)
class Rule:
    alert: str
    expr: str
    for_s: float
    keep_firing_for_s: float
    labels: dict[str, Template] = field(default_factory=dict)
    annotations: dict[str, Template] = field(default_factory=dict)


@dataclass(frozen=True)
class Group:
    name: str
    interval_s: float
    rules: tuple[Rule, ...]


def default_rules_text() -> str:
    return resources.files("gpuscope.alerts").joinpath("default_rules.yaml").read_text(encoding="utf-8")


def load_rules_file(path: str | Path) -> list[Group]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise RulesError(str(path), [f"cannot read: {exc.strerror or exc}"]) from None
    return parse_rules(text, str(path))


def load_rule_files(paths: list[Path]) -> list[Group]:
    """Several rule files as one set; a group name may appear in only one of them."""
    groups: list[Group] = []
    for path in paths:
        for group in load_rules_file(path):
            if any(g.name == group.name for g in groups):
                raise RulesError(str(path), [f"group {group.name!r} is also defined in an earlier file"])
            groups.append(group)
    return groups


def parse_rules(text: str, source: str = "<rules>") -> list[Group]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RulesError(source, [f"not valid YAML: {exc}"]) from None
    problems: list[str] = []
    if not isinstance(doc, dict) or set(doc) != {"groups"} or not isinstance(doc["groups"], list):
        raise RulesError(source, ["expected a mapping with one key, 'groups', holding a list"])
    groups, names = [], set()
    for i, raw in enumerate(doc["groups"]):
        where = f"groups[{i}]"
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not raw["name"]:
            problems.append(f"{where}: a group needs a non-empty 'name'")
            continue
        where = f"group {raw['name']!r}"
        if raw["name"] in names:
            problems.append(f"{where}: the name is used twice")
        names.add(raw["name"])
        unknown = set(raw) - {"name", "interval", "rules"}
        if unknown:
            problems.append(f"{where}: unknown keys {sorted(unknown)}")
        interval = _duration(raw.get("interval", "30s"), f"{where}: interval", problems)
        if interval is not None and interval <= 0:
            problems.append(f"{where}: interval must be positive")
        rules = []
        for j, rule in enumerate(raw.get("rules") or []):
            parsed = _rule(rule, f"{where} rules[{j}]", problems)
            if parsed:
                rules.append(parsed)
        groups.append(Group(raw["name"], interval or DEFAULT_INTERVAL_S, tuple(rules)))
    if problems:
        raise RulesError(source, problems)
    return groups


def _rule(raw: Any, where: str, problems: list[str]) -> Rule | None:
    if not isinstance(raw, dict):
        problems.append(f"{where}: a rule is a mapping")
        return None
    if "record" in raw:
        problems.append(f"{where}: recording rules are not supported (the SQL views play their part)")
        return None
    name = raw.get("alert")
    if not isinstance(name, str) or not _ALERT_NAME.match(name):
        problems.append(f"{where}: 'alert' must be a name like GpuOverTemperature, got {name!r}")
        return None
    where = f"{where} ({name})"
    unknown = set(raw) - _RULE_KEYS
    if unknown:
        problems.append(f"{where}: unknown keys {sorted(unknown)}")
    expr = raw.get("expr")
    if not isinstance(expr, str) or not expr.strip():
        problems.append(f"{where}: 'expr' must be a SQL query")
        return None
    expr = expr.strip().rstrip(";").strip()
    for_s = _duration(raw.get("for", "0s"), f"{where}: for", problems)
    keep_s = _duration(raw.get("keep_firing_for", "0s"), f"{where}: keep_firing_for", problems)
    labels = _templates(raw.get("labels"), f"{where}: labels", problems)
    if "alertname" in labels:
        problems.append(f"{where}: labels: 'alertname' is set from 'alert'")
    annotations = _templates(raw.get("annotations"), f"{where}: annotations", problems)
    return Rule(name, expr, for_s or 0.0, keep_s or 0.0, labels, annotations)


def _duration(value: Any, what: str, problems: list[str]) -> float | None:
    try:
        return parse_duration(value, what)
    except ValueError as exc:
        problems.append(str(exc))
        return None


def _templates(raw: Any, what: str, problems: list[str]) -> dict[str, Template]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.append(f"{what}: expected a mapping of names to strings")
        return {}
    out = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not _LABEL_NAME.match(key):
            problems.append(f"{what}: {key!r} is not a valid name")
            continue
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            problems.append(f"{what}: {key}: expected a string, got {value!r}")
            continue
        try:
            out[key] = compile_template(str(value), f"{what}: {key}")
        except ValueError as exc:
            problems.append(str(exc))
    return out
