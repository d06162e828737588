"""Hostile label and annotation values in chat messages (issue 16, finding 5).

Node, rack, cluster and job names, label values and annotations come from exporters and rules, not
from us: in a chat message they must show as their text, never become a mention that pages a whole
channel, a disguised link, an image fetched from elsewhere, or formatting. Each service's payload is
checked for active constructs built from the values, and for the values' text once the service's own
escaping is undone (what a reader sees). Our own formatting (the headline's emphasis, the link to
gpuscope) stays as it was.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gpuscope.alerts.notify import KINDS
from gpuscope.alerts.notify.message import Alert, Message

ZWSP = "\u200b"
EXTERNAL = "https://gpuscope.example.org"
OUR_LINK = f"<{EXTERNAL}|open gpuscope>"

NODE = "<!here> [click me](https://evil.example/x) @everyone"
RACK = "<https://evil.example/login|Reset your password> <users/all> @channel @all @here"
JOB = "**urgent** _now_ ~~gone~~ `rm -rf` ||spoiler|| <@123456789> <#42> <@&7> ![pixel](https://evil.example/p.png)"
CLUSTER = "a & b <b>bold</b> <at>Everyone</at> <!channel>"
ALERTNAME = "GpuHot<!channel>"
SUMMARY = "GPU on <!here> is hot @everyone [docs](https://evil.example/d)"
DESCRIPTION = "first line\n# Heading\n> quote\n- item\n1. one\n[ref]: https://evil.example/ref\nsee [ref] & <users/all>"
HOSTILE = (NODE, RACK, JOB, CLUSTER, ALERTNAME, SUMMARY, *DESCRIPTION.split("\n"))


def hostile_message() -> Message:
    labels = {"alertname": ALERTNAME, "severity": "critical", "node": NODE, "rack": RACK, "job": JOB,
              "cluster": CLUSTER}  # fmt: skip
    alert = Alert(
        "firing", labels, {"summary": SUMMARY, "description": DESCRIPTION}, "2026-11-22T12:00:00Z", None,
        "0123456789abcdef", f"{EXTERNAL}/alerts",
    )  # fmt: skip
    return Message("ops", "{}:{node}", {"node": NODE, "rack": RACK}, (alert,), EXTERNAL)


def strings(doc: Any) -> Iterator[str]:
    """Every string in a JSON document, keys aside."""
    if isinstance(doc, str):
        yield doc
    elif isinstance(doc, dict):
        for value in doc.values():
            yield from strings(value)
    elif isinstance(doc, list | tuple):
        for value in doc:
            yield from strings(value)


def _unbackslash(text: str) -> str:
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text)


def _unentity(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


# What a reader sees of a payload string: the service's documented escapes undone.
SHOWN: dict[str, Callable[[str], str]] = {
    "slack": _unentity,
    "discord": lambda s: _unbackslash(s).replace(ZWSP, ""),
    "mattermost": lambda s: _unbackslash(_unentity(s)).replace(ZWSP, ""),
    "teams": lambda s: _unbackslash(s).replace(ZWSP, ""),
    "googlechat": lambda s: s.replace(ZWSP, ""),
}

UNESCAPED = r"(?<!\\)"  # not preceded by a backslash
# a formatting character left as it is (an underscore inside a word is not one)
FORMATTING = UNESCAPED + r"[*~`]|(?<![\\\w])_|(?<=[^\W_])_(?![^\W_])"
OPENS = r"(?:^|[\s(\[])"  # where Google Chat's *bold*, _italic_, ~strike~ and `code` may start
# Constructs that would act in each service, none of which may come from a value.
ACTIVE: dict[str, list[str]] = {
    # <!here> <!channel> <@U..> <#C..> <url|text>: Slack's markup is all in angle brackets
    "slack": [r"<(?!https://gpuscope\.example\.org\|open gpuscope>)", r"(?<!open gpuscope)>"],
    "discord": [
        r"@(everyone|here)\b",
        UNESCAPED + r"<",
        r"\]\(",
        FORMATTING,
        UNESCAPED + r"\|",  # || spoilers ||
        r"(?m)^[ \t]*(#|>|-|\d+\.)\s",
    ],
    "mattermost": [
        r"@(channel|all|here)\b",
        r"[<>]",
        r"\]\(",
        r"!\[",
        UNESCAPED + r"\]:",
        FORMATTING,
        UNESCAPED + r"\|",
        r"(?m)^[ \t]*(#|-|\d+\.)\s",
    ],
    "teams": [r"\]\(", UNESCAPED + r"\]:", UNESCAPED + r"<", FORMATTING, r"(?m)^[ \t]*(#|-|\d+\.)\s"],
    "googlechat": [
        # a zero-width space after each < of a value: no <users/all>, no <url|text>
        r"<(?!\u200b|https://gpuscope\.example\.org\|open gpuscope>)",
        r"<users/",
        OPENS + r"\*\*urgent",
        OPENS + r"_now_",
        OPENS + r"~~gone",
        OPENS + r"`rm",
        r"(?m)^-\s",
        r"\]\(",
        r"\]:",  # Markdown links, should the space take Markdown
    ],
}


@pytest.mark.parametrize("kind", sorted(SHOWN))
def test_hostile_values_cannot_mention_link_or_format(kind: str) -> None:
    body = KINDS[kind](hostile_message())
    texts = list(strings(body))
    for pattern in ACTIVE[kind]:
        for text in texts:
            if kind in ("slack", "googlechat") and text in (EXTERNAL, f"{EXTERNAL}/alerts"):
                continue
            found = re.search(pattern, text)
            assert found is None, f"{kind}: {pattern!r} matches {found.group(0)!r} in {text!r}"


@pytest.mark.parametrize("kind", sorted(SHOWN))
def test_hostile_values_still_read_as_themselves(kind: str) -> None:
    shown = "\n".join(SHOWN[kind](t) for t in strings(KINDS[kind](hostile_message())))
    for value in HOSTILE:
        assert value in shown, f"{kind}: {value!r} is not shown as it is:\n{shown}"


def test_our_own_formatting_stays() -> None:
    message = hostile_message()
    slack = KINDS["slack"](message)
    assert slack["blocks"][-1]["elements"][0]["text"] == OUR_LINK
    assert slack["text"].startswith("[FIRING:1] CRITICAL ")
    assert slack["unfurl_links"] is False and slack["unfurl_media"] is False, "no previews of a value's URL"
    discord = KINDS["discord"](message)
    assert discord["allowed_mentions"] == {"parse": []}
    assert discord["embeds"][0]["title"].startswith("[FIRING] ")
    chat = KINDS["googlechat"](message)["text"]
    assert chat.startswith("*[FIRING:1] CRITICAL ") and chat.endswith(OUR_LINK)
    teams = KINDS["teams"](message)["attachments"][0]["content"]
    assert teams["actions"][0]["url"] == EXTERNAL


def test_plain_values_are_left_alone() -> None:
    """The usual names (dashes, dots, underscores inside a word, digits) are not touched in the services
    whose messages people copy them from."""
    labels = {"alertname": "GpuOverTemperature", "severity": "warning", "node": "gpu-node-01.dc1",
              "job": "train_llama_7b", "gpu": "3"}  # fmt: skip
    alert = Alert("firing", labels, {"summary": "GPU 3 on gpu-node-01.dc1 is at 91 C"}, "2026-11-22T12:00:00Z",
                  None, "f", "")  # fmt: skip
    message = Message("ops", "k", {"node": "gpu-node-01.dc1"}, (alert,), EXTERNAL)
    for kind in ("slack", "discord", "mattermost", "teams", "googlechat"):
        text = "\n".join(strings(KINDS[kind](message)))
        for value in ("gpu-node-01.dc1", "train_llama_7b", "GPU 3 on gpu-node-01.dc1 is at 91 C"):
            assert value in text, f"{kind}: {value!r} was changed:\n{text}"


@pytest.mark.parametrize("kind", ["webhook", "alertmanager"])
def test_machine_payloads_carry_the_values_unchanged(kind: str) -> None:
    """The generic webhook and Alertmanager get JSON for programs: the values as they are."""
    body = KINDS[kind](hostile_message())
    alerts = body["alerts"] if kind == "webhook" else body
    assert alerts[0]["labels"]["node"] == NODE and alerts[0]["annotations"]["description"] == DESCRIPTION
