"""Names from the schedulers (users, accounts, job ids, nodes) made safe to print on one line, and the numbers
as the digests write them."""

from __future__ import annotations

import re

# Line breaks of every kind (\r, \n, \v, \f, \x85, \u2028, \u2029), other control characters and the
# bidirectional overrides that make a name read backwards: a name is one line, shown as it is spelled.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
MAX_NAME = 80


def one_line(name: str | None, missing: str = "(none)", limit: int = MAX_NAME) -> str:
    """`name` with each control character as a space, at most `limit` characters."""
    if name is None:
        return missing
    text = _UNPRINTABLE.sub(" ", name).strip() or repr(name)[:limit]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def hours(value: float) -> str:
    return f"{value:.1f}"


def share(part: float, whole: float) -> str:
    return f"{round(100 * part / whole)} %" if whole > 0 else "-"
