"""Label matchers as Alertmanager writes them: name=value, name!=value, name=~regex, name!~regex."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

OPS = ("=~", "!~", "!=", "=")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Matcher:
    name: str
    op: str
    value: str

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"matcher: {self.name!r} is not a label name")
        if self.op not in OPS:
            raise ValueError(f"matcher: operator {self.op!r} is not one of {', '.join(OPS)}")
        if self.op in ("=~", "!~"):
            try:
                re.compile(self.value)
            except re.error as exc:
                raise ValueError(f"matcher {self.name}{self.op}{self.value!r}: bad regular expression: {exc}") from None

    def matches(self, labels: dict[str, str]) -> bool:
        value = labels.get(self.name, "")  # an absent label matches as the empty string
        if self.op == "=":
            return value == self.value
        if self.op == "!=":
            return value != self.value
        found = re.fullmatch(self.value, value) is not None  # anchored, as in Alertmanager
        return found if self.op == "=~" else not found

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "op": self.op, "value": self.value}

    def __str__(self) -> str:
        return f"{self.name}{self.op}{self.value!r}"


def parse_matcher(text: str) -> Matcher:
    """'severity=critical', 'node=~"gpu-0[1-4]"'; quotes around the value are optional."""
    for op in OPS:  # the two-character operators first
        name, sep, value = text.partition(op)
        if sep and name.strip() and not any(o in name for o in ("=", "!", "~")):
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            return Matcher(name.strip(), op, value)
    raise ValueError(f"matcher: {text!r} is not name=value, name!=value, name=~regex or name!~regex")


def matcher_from(obj: Any) -> Matcher:
    """A matcher from a YAML/JSON item: the string form or {"name", "op", "value"}."""
    if isinstance(obj, str):
        return parse_matcher(obj)
    if isinstance(obj, dict) and set(obj) <= {"name", "op", "value"} and "name" in obj and "value" in obj:
        return Matcher(str(obj["name"]), str(obj.get("op", "=")), str(obj["value"]))
    raise ValueError(f"matcher: {obj!r} is neither 'name=value' nor {{name, op, value}}")


def all_match(matchers: tuple[Matcher, ...] | list[Matcher], labels: dict[str, str]) -> bool:
    return all(m.matches(labels) for m in matchers)
