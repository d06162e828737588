"""Prometheus durations ("30s", "5m", "1h30m", "0s") as seconds."""

from __future__ import annotations

import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0, "y": 365 * 86400.0}
_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")


def parse_duration(text: object, what: str) -> float:
    """Seconds in `text`; ValueError naming `what` for anything Prometheus would not accept."""
    if isinstance(text, bool) or not isinstance(text, str | int):
        raise ValueError(f"{what}: expected a duration like '30s' or '5m', got {text!r}")
    if isinstance(text, int) or text.strip() == "0":
        if int(text) != 0:
            raise ValueError(f"{what}: a duration needs a unit ('{text}s'?)")
        return 0.0
    text = text.strip()
    pos, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += int(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"{what}: {text!r} is not a duration (use units ms, s, m, h, d, w, y, e.g. '1h30m')")
    return total
