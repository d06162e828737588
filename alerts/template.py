"""The part of Prometheus's alert templating that rules use: {{ $labels.name }}, {{ $value }}, and
{{ $value | printf "%.1f" }} / {{ printf "%.1f" $value }} / {{ $value | humanize }}.

Templates are compiled when the rules file is read, so a typo is reported by `gpuscope alerts check`
rather than found in a chat message.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass

_ACTION = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}")
_FUNCTIONS = ("printf", "humanize", "humanizePercentage", "humanizeDuration")


@dataclass(frozen=True)
class Template:
    source: str
    _parts: tuple[str | Callable[[dict[str, str], float | None], str], ...]

    def render(self, labels: dict[str, str], value: float | None) -> str:
        return "".join(p if isinstance(p, str) else p(labels, value) for p in self._parts)


def compile_template(source: str, what: str) -> Template:
    parts: list[str | Callable[[dict[str, str], float | None], str]] = []
    pos = 0
    for match in _ACTION.finditer(source):
        parts.append(source[pos : match.start()])
        parts.append(_action(match.group(1), f"{what}: {{{{ {match.group(1)} }}}}"))
        pos = match.end()
    rest = source[pos:]
    if "{{" in rest or "}}" in rest:
        raise ValueError(f"{what}: unbalanced '{{{{' or '}}}}'")
    parts.append(rest)
    return Template(source, tuple(p for p in parts if p != ""))


def _action(text: str, what: str) -> Callable[[dict[str, str], float | None], str]:
    stages = [s.strip() for s in text.split("|")]
    try:
        words = [shlex.split(stage) for stage in stages]
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None
    first = words[0]
    if not first:
        raise ValueError(f"{what}: empty action")
    if first[0] in _FUNCTIONS:  # prefix form: printf "%.1f" $value
        func, args = first[0], first[1:]
        if not args:
            raise ValueError(f"{what}: {func} needs an argument")
        source = _operand(args[-1], what)
        stages_words = [[func, *args[:-1]], *words[1:]]
    else:
        if len(first) != 1:
            raise ValueError(f"{what}: expected $value or $labels.name, got {stages[0]!r}")
        source = _operand(first[0], what)
        stages_words = words[1:]
    filters = [_filter(stage, what) for stage in stages_words]

    def run(labels: dict[str, str], value: float | None) -> str:
        out: object = source(labels, value)
        for f in filters:
            out = f(out)
        return _text(out)

    return run


def _operand(word: str, what: str) -> Callable[[dict[str, str], float | None], object]:
    if word in ("$value", ".Value"):
        return lambda labels, value: value
    for prefix in ("$labels.", ".Labels."):
        if word.startswith(prefix) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", word[len(prefix) :]):
            name = word[len(prefix) :]
            return lambda labels, value: labels.get(name, "")
    raise ValueError(f"{what}: unknown operand {word!r} (use $value or $labels.name)")


def _filter(words: list[str], what: str) -> Callable[[object], object]:
    if not words or words[0] not in _FUNCTIONS:
        raise ValueError(f"{what}: unknown function {' '.join(words)!r} (supported: {', '.join(_FUNCTIONS)})")
    func, args = words[0], words[1:]
    if func == "printf":
        if len(args) != 1:
            raise ValueError(f'{what}: printf takes one format, e.g. printf "%.1f"')
        fmt = args[0]
        try:
            fmt % 1.0
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{what}: bad printf format {fmt!r}: {exc}") from None
        return lambda x: fmt % (x if x is not None else math.nan)
    if args:
        raise ValueError(f"{what}: {func} takes no arguments")
    if func == "humanize":
        return _humanize
    if func == "humanizePercentage":
        return lambda x: f"{_number(x) * 100:.4g}%"
    return lambda x: _duration(_number(x))


def _number(x: object) -> float:
    try:
        return float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def _humanize(x: object) -> str:
    v = _number(x)
    if not math.isfinite(v) or v == 0 or 1e-3 <= abs(v) < 1000:
        return f"{v:.4g}"
    for size, prefix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= size:
            return f"{v / size:.4g}{prefix}"
    for size, prefix in ((1e-3, "m"), (1e-6, "u"), (1e-9, "n")):
        if abs(v) >= size:
            return f"{v / size:.4g}{prefix}"
    return f"{v:.4g}"


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return str(seconds)
    rest = int(abs(seconds))
    out = "".join(f"{n}{u}" for n, u in _split(rest))
    return ("-" if seconds < 0 else "") + (out or f"{abs(seconds):.3g}s")


def _split(rest: int) -> list[tuple[int, str]]:
    out = []
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m"), (1, "s")):
        if rest >= size:
            out.append((rest // size, unit))
            rest %= size
    return out


def _text(x: object) -> str:
    if x is None:
        return ""
    if isinstance(x, float):
        return f"{x:.10g}" if math.isfinite(x) else str(x)
    return str(x)
