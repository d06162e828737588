"""Label matchers as Alertmanager writes them: name=value, name!=value, name=~regex, name!~regex.

Regular expressions run on RE2, the engine Alertmanager's Go regexp follows: linear time in the input,
so a silence or route written by anyone with the admin token (`(a*)*b`) cannot stall the alert loop the
way a backtracking engine would, and the syntax accepted (no back-references, no look-around) is
Alertmanager's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import re2

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a bad pattern is our ValueError, not a line on stderr

OPS = ("=~", "!~", "!=", "=")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Matcher:
    name: str
    op: str
    value: str
    _regex: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"matcher: {self.name!r} is not a label name")
        if self.op not in OPS:
            raise ValueError(f"matcher: operator {self.op!r} is not one of {', '.join(OPS)}")
        if self.op in ("=~", "!~"):
            try:
                regex = re2.compile(self.value, _RE2_OPTIONS)
            except re2.error as exc:
                reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
                raise ValueError(
                    f"matcher {self.name}{self.op}{self.value!r}: bad regular expression: {reason}"
                ) from None
            object.__setattr__(self, "_regex", regex)  # compiled once; the dataclass is frozen

    def matches(self, labels: dict[str, str]) -> bool:
        value = labels.get(self.name, "")  # an absent label matches as the empty string
        if self.op == "=":
            return value == self.value
        if self.op == "!=":
            return value != self.value
        found = self._regex.fullmatch(value) is not None  # anchored, as in Alertmanager
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
