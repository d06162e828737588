"""The weekly account summary as each chat service's webhook wants it. Account and user names go through
that service's escaping (alerts/notify/escape.py) after being made one line (text.one_line): a name cannot
mention a channel, hide a link or break the layout. The generic webhook gets the figures as JSON."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuscope.alerts.notify import escape
from gpuscope.alerts.notify.message import truncate
from gpuscope.reports.digest.summary import AccountSummary

SECTION_TEXT = 3000  # Slack's limit for a section's text


def slack(summary: AccountSummary) -> dict[str, Any]:
    esc = escape.slack
    facts = "\n".join(f"*{label}:* {value}" for label, value in summary.facts())
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": truncate(summary.headline(esc), 150)}},
        {"type": "section", "text": {"type": "mrkdwn", "text": truncate(facts, SECTION_TEXT)}},
    ]
    if summary.top_users:
        users = "*Top users by GPU-hours allocated*\n" + "\n".join(f"• {u}" for u in summary.user_lines(esc))
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": truncate(users, SECTION_TEXT)}})
    return {"text": summary.headline(esc), "blocks": blocks, "unfurl_links": False, "unfurl_media": False}


def teams(summary: AccountSummary) -> dict[str, Any]:
    esc = escape.teams
    body: list[dict[str, Any]] = [
        {"type": "TextBlock", "text": summary.headline(esc), "weight": "Bolder", "size": "Medium", "wrap": True},
        {"type": "FactSet", "facts": [{"title": label, "value": value} for label, value in summary.facts()]},
    ]
    if summary.top_users:
        lines = "\n".join(f"- {u}" for u in summary.user_lines(esc))
        body.append({"type": "TextBlock", "text": f"Top users by GPU-hours allocated\n\n{lines}", "wrap": True})
    card = {"type": "AdaptiveCard", "$schema": "http://adaptivecards.io/schemas/adaptive-card.json", "version": "1.2",
            "body": body}  # fmt: skip
    return {
        "type": "message",
        "attachments": [
            {"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None, "content": card}
        ],
    }


def discord(summary: AccountSummary) -> dict[str, Any]:
    esc = escape.discord
    fields = [{"name": label, "value": value, "inline": True} for label, value in summary.facts()]
    if summary.top_users:
        users = truncate("\n".join(summary.user_lines(esc)), 1024)
        fields.append({"name": "Top users by GPU-hours allocated", "value": users, "inline": False})
    embed = {"title": truncate(summary.headline(esc), 256), "fields": fields[:25]}
    return {"content": truncate(summary.headline(esc), 2000), "embeds": [embed], "allowed_mentions": {"parse": []}}


def mattermost(summary: AccountSummary) -> dict[str, Any]:
    return {"text": _markdown(summary, escape.mattermost)}


def googlechat(summary: AccountSummary) -> dict[str, Any]:
    return {"text": _markdown(summary, escape.googlechat)}


def webhook(summary: AccountSummary) -> dict[str, Any]:
    """For programs: the figures as the usage API writes them, and the plain text for people."""
    return {
        "kind": "gpuscope.usage_digest",
        "week_start": summary.week_start.isoformat(),
        "account": summary.account,
        "currency": summary.currency,
        "jobs": summary.jobs,
        "figures": summary.figures.as_json() if summary.figures else None,
        "top_users": [
            {"user": u.user, "gpu_hours_allocated": u.gpu_hours_allocated, "gpu_hours_idle": u.gpu_hours_idle}
            for u in summary.top_users
        ],
        "text": summary.text(),
    }


def _markdown(summary: AccountSummary, esc: escape.Escape) -> str:
    """The summary in markup common to Mattermost and Google Chat: *bold* headline, one fact a line."""
    lines = [f"*{summary.headline(esc)}*", *(f"{label}: {value}" for label, value in summary.facts())]
    if summary.top_users:
        lines += ["Top users by GPU-hours allocated:", *(f"  {u}" for u in summary.user_lines(esc))]
    return truncate("\n".join(lines), 16_000)


PAYLOADS: dict[str, Callable[[AccountSummary], dict[str, Any]]] = {
    "slack": slack,
    "teams": teams,
    "discord": discord,
    "mattermost": mattermost,
    "googlechat": googlechat,
    "webhook": webhook,
}
