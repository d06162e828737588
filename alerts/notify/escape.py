"""User-supplied text in each chat service's markup: shown as its text, never acting as markup.

Label values and annotations (node, rack, cluster and job names, summaries rendered from them) come
from exporters and rule files, not from us. Put as they are into a chat message, `<!here>` pages a
Slack channel, `[text](https://…)` hides where a Discord link goes, `![x](https://…)` makes Mattermost
fetch an image, `<users/all>` mentions everyone in a Google Chat space. Each builder passes every such
value (never its own formatting) through its service's function here:

- Slack (mrkdwn, and the same entities in plain_text and attachments): &, <, > as &amp; &lt; &gt;, the
  escaping Slack documents; all of Slack's links and mentions are written inside < >.
- Discord (markdown): a backslash before the markdown characters (\\ * _ ~ ` | [ ] ( ) < >, and # - +
  > and `1.` at the start of a line), and a zero-width space after @ so that @everyone, @here and
  <@id> are text (the payload also sends allowed_mentions {"parse": []}, so nothing pings anyway).
- Mattermost (markdown, Slack-compatible): the markdown characters backslash-escaped as for Discord,
  &, <, > as entities (Mattermost turns Slack's <url|text> and <!channel> into links and mentions, so
  no < may be left), and a zero-width space after @ (@channel, @all, @here, @user).
- Microsoft Teams (Adaptive Card TextBlock and FactSet markdown: emphasis, lists, [text](url)): the
  markdown characters backslash-escaped; ( is escaped as well as ], so `](` never occurs even where a
  client ignores backslashes.
- Google Chat (its own markup: *bold* _italic_ ~strike~ `code`, <url|text>, <users/all>): Chat has no
  escape character, so a zero-width space goes after each < (no link nor mention can form), after each ]
  (nor a Markdown [text](url), should the space's app use Markdown syntax), and before a formatting
  character that could open a span (one not inside a word).

An underscore inside a word (train_llama_7b) is not markup in any of them and is left alone, as are
dashes and dots inside names, so that names copied from a message are the names.
"""

from __future__ import annotations

import re
from collections.abc import Callable

ZWSP = "\u200b"  # zero-width space

Escape = Callable[[str], str]


def plain(text: str) -> str:
    """No markup at all (JSON for programs: the generic webhook, Alertmanager)."""
    return text


def slack(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _markdown(always: str, line_start: str, mentions: bool) -> re.Pattern[str]:
    parts = [
        # a block marker at the start of a line: heading, quote, list item (- + or 1. 1))
        rf"(?P<block>^[ \t]*(?:[{re.escape(line_start)}]|\d+[.)]))",
        rf"(?P<char>[{re.escape(always)}])",
        r"(?P<char2>(?<![^\W_])_|_(?![^\W_]))",  # an underscore not inside a word
    ]
    if mentions:
        parts.append(r"(?P<at>@(?=\w))")
    return re.compile("|".join(parts), re.MULTILINE)


def _escape_markdown(pattern: re.Pattern[str], text: str) -> str:
    def one(match: re.Match[str]) -> str:
        found = match.group(0)
        if match.lastgroup == "block":
            return found[:-1] + "\\" + found[-1]
        if match.lastgroup == "at":
            return "@" + ZWSP
        return "\\" + found

    return pattern.sub(one, text)


_DISCORD = _markdown("\\*~`|[]()<>", "-+#>", mentions=True)
_MATTERMOST = _markdown("\\*~`|[]()", "-+#", mentions=True)
_TEAMS = _markdown("\\*~`[]()<>", "-+#>", mentions=False)


def discord(text: str) -> str:
    return _escape_markdown(_DISCORD, text)


def mattermost(text: str) -> str:
    return slack(_escape_markdown(_MATTERMOST, text))


def teams(text: str) -> str:
    return _escape_markdown(_TEAMS, text)


_CHAT_OPENER = re.compile(r"(?<![^\W_])([*_~`])|(?m:^([ \t]*)-(?=\s))")


def googlechat(text: str) -> str:
    # ] too: a space whose app posts in Markdown syntax would otherwise take [text](url) as a link
    text = text.replace("<", "<" + ZWSP).replace("]", "]" + ZWSP)
    return _CHAT_OPENER.sub(lambda m: ZWSP + m.group(1) if m.group(1) else m.group(2) + ZWSP + "-", text)
