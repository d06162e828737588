"""What a weekly usage digest gives the chat builders: the shape they read, not reports' own type.

Each kind's module (slack.py, teams.py, ...) builds its `digest(summary)` from this. reports sits above
alerts in the layers, so these modules cannot import its AccountSummary (reports/digest/summary.py);
that class has these members, and mypy checks it against this Protocol where reports passes it in.
Names (the account, the users) are escaped by the builder, through `headline(esc)` and `user_lines(esc)`;
`facts()` are our own words and numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any, Protocol

from gpuscope.alerts.notify.escape import Escape, plain

TOP_USERS_TITLE = "Top users by GPU-hours allocated"


class DigestFigures(Protocol):
    def as_json(self) -> dict[str, Any]: ...


class DigestUser(Protocol):
    @property
    def user(self) -> str | None: ...
    @property
    def gpu_hours_allocated(self) -> float: ...
    @property
    def gpu_hours_idle(self) -> float: ...


class DigestSummary(Protocol):
    """One account's week (reports/digest/summary.py AccountSummary)."""

    @property
    def account(self) -> str | None: ...
    @property
    def week_start(self) -> date: ...
    @property
    def figures(self) -> DigestFigures | None: ...
    @property
    def jobs(self) -> int: ...
    @property
    def currency(self) -> str | None: ...
    @property
    def top_users(self) -> Sequence[DigestUser]: ...

    def headline(self, esc: Escape = plain) -> str: ...
    def facts(self) -> list[tuple[str, str]]: ...
    def user_lines(self, esc: Escape = plain) -> list[str]: ...
    def text(self, esc: Escape = plain) -> str: ...


def markdown_text(summary: DigestSummary, esc: Escape) -> str:
    """The digest as lines of text in the markup Mattermost and Google Chat share: a *bold* headline, one
    fact a line, then the top users."""
    lines = [f"*{summary.headline(esc)}*", *(f"{label}: {value}" for label, value in summary.facts())]
    if summary.top_users:
        lines += [f"{TOP_USERS_TITLE}:", *(f"  {u}" for u in summary.user_lines(esc))]
    return "\n".join(lines)
