"""The logging every gpuscope process runs with, and the redaction of secrets from what it logs.

Webhook URLs carry their secret in the path or the query, the collector's tokens travel as bearer
headers, DSNs carry a password. Our own log lines keep them out already (alerts/redact.py,
EmbeddedPostgres.redacted_dsn); the libraries do not: httpx logs every request's full URL at INFO. So:

- the libraries that log requests, URLs or connection strings (QUIET_LOGGERS) log warnings and errors
  only, whatever the level of our own loggers (-v included);
- as defence in depth, every record that reaches the root logger's handlers (and uvicorn's, which do not
  propagate) is redacted first, the traceback included: the paths and queries of the URLs registered as
  secret (the alert receivers'); in any URL the password, the query's values, and the path when it holds
  a webhook's secret (/services/, /hooks/, /api/webhooks/, /workflows/…) or a token-like segment (a
  PostgreSQL DSN keeps its user, database and options); passwords, tokens and signatures in `key=value`
  form, Authorization headers and bearer tokens become ***. Other URLs keep their paths, so that
  "serving http://host:9400/metrics" still says where.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import TextIO
from urllib.parse import urlsplit

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Loggers that print a request line with its URL (httpx, httpcore, urllib3, requests, uvicorn's access
# log, werkzeug's one line per dashboard request), or connections and pool events (psycopg, psycopg.pool).
QUIET_LOGGERS = ("httpx", "httpcore", "urllib3", "requests", "hpack", "uvicorn.access", "werkzeug", "psycopg")
# uvicorn's loggers write through handlers of their own and do not propagate: filtered on the logger.
_OWN_HANDLER_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")

REDACTED = "***"
_URL = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*)://([^\s'\"<>`]+)")
_TRAILING = ".,;:!?)]}"
_SECRET_KEYS = r"password|passwd|pwd|pass|token|access_token|refresh_token|api_key|apikey|secret|sig|signature"  # noqa: S105 (the names of secrets, not one)
_KEY_VALUE = re.compile(rf"(?i)\b((?:{_SECRET_KEYS})\s*=\s*)('[^']*'|\"[^\"]*\"|[^\s&;,'\")]+)")
_QUOTED_KEY = re.compile(rf"(?i)([\"'](?:{_SECRET_KEYS})[\"']\s*:\s*)(\"[^\"]*\"|'[^']*')")
# Authorization: Bearer X, {'authorization': 'Basic X'}, proxy-authorization=X
_AUTH_HEADER = re.compile(r"(?i)(\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)((?:[a-z]+\s+)?)[^\s'\",}]+")
# a credential after its scheme: at least 8 characters, one of them a capital or a digit (not a word)
_CREDENTIAL = r"(?=[A-Za-z0-9._~+/=-]*[A-Z0-9])[A-Za-z0-9._~+/=-]{8,}"
_BEARER = re.compile(rf"(?i:\b(bearer)(\s+)){_CREDENTIAL}")


# Path segments that put a webhook's secret after them (Slack /services/, Discord /api/webhooks/,
# Mattermost /hooks/, Teams /workflows/…/triggers/…/invoke): such a path is not shown at all.
_WEBHOOK_SEGMENTS = frozenset({"services", "hooks", "hook", "webhooks", "webhook", "workflows", "triggers", "invoke"})
# A segment that looks like a token: long, of a token's characters, letters and digits mixed (or very long).
_TOKEN_SEGMENT = re.compile(r"(?=[^/]*[A-Za-z])(?=[^/]*[0-9])[A-Za-z0-9_.~=+%-]{16,}|[A-Za-z0-9_.~=+%-]{32,}")
_registered: dict[str, re.Pattern[str]] = {}  # a receiver's path or query -> where it occurs as itself


def register_secret(url: str) -> None:
    """A URL known to carry a secret (a receiver's): its path and query never show in a log line, whatever
    they look like."""
    parts = urlsplit(url)
    if len(parts.path) >= 8 and parts.path not in _registered:
        # the whole path, after a host or on its own; not in a host name (https://discord.com for /discord)
        _registered[parts.path] = re.compile(rf"(?<!/){re.escape(parts.path)}(?![\w/.-])")
    if len(parts.query) >= 4 and parts.query not in _registered:
        _registered[parts.query] = re.compile(re.escape(parts.query))


def redact_secrets(text: str) -> str:
    """`text` with what looks like a secret replaced: registered URLs' paths and queries; in URLs, a
    password, query values, and a path that holds a webhook's secret or a token; secret `key=value`
    pairs, Authorization headers and bearer tokens."""
    if "://" in text:
        text = _URL.sub(_redact_url_match, text)
    for secret in sorted((s for s in _registered if s in text), key=len, reverse=True):
        text = _registered[secret].sub("/…" if secret.startswith("/") else REDACTED, text)
    text = _KEY_VALUE.sub(lambda m: m.group(1) + REDACTED, text)
    text = _QUOTED_KEY.sub(lambda m: m.group(1) + m.group(2)[0] + REDACTED + m.group(2)[0], text)
    text = _AUTH_HEADER.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    return _BEARER.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)


def _redact_url_match(match: re.Match[str]) -> str:
    scheme, rest = match.group(1), match.group(2)
    stripped = rest.rstrip(_TRAILING)
    return f"{scheme}://{_redact_url_rest(scheme.lower(), stripped)}{rest[len(stripped) :]}"


def _redact_url_rest(scheme: str, rest: str) -> str:
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    authority, tail = rest[:cut], rest[cut:]
    if "@" in authority:
        userinfo, host = authority.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        authority = f"{user}:{REDACTED}@{host}" if ":" in userinfo else f"{REDACTED}@{host}"
    if scheme in ("postgres", "postgresql"):
        return authority + tail  # the database name and options stay; a password= among them goes below
    path, _, fragment = tail.partition("#")
    path, question, query = path.partition("?")
    segments = path.split("/")
    if any(seg.lower() in _WEBHOOK_SEGMENTS or _TOKEN_SEGMENT.fullmatch(seg) for seg in segments):
        path = "/…"
    if question:
        query = "&".join(f"{p.partition('=')[0]}={REDACTED}" if "=" in p else REDACTED for p in query.split("&"))
    return authority + path + question + query + ("#…" if fragment else "")


class RedactSecrets(logging.Filter):
    """Rewrites each record without its secrets (message, arguments, traceback); never drops a record.

    The arguments are redacted one by one, so that a formatter that reads them (uvicorn's access log
    does) still finds them; should the message still show a secret (one in the format string, or one
    only recognisable in context, as in "password=%s"), it becomes the redacted text with no arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(_redact_arg(a) for a in record.args)
        elif isinstance(record.args, Mapping):
            record.args = {k: _redact_arg(v) for k, v in record.args.items()}
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: logging reports it as usual when the record is emitted
            return True
        redacted = redact_secrets(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_secrets(record.exc_text)
        if record.stack_info:
            record.stack_info = redact_secrets(record.stack_info)
        return True


def _redact_arg(arg: object) -> object:
    if arg is None or isinstance(arg, int | float):
        return arg
    try:
        text = arg if isinstance(arg, str) else str(arg)  # e.g. httpx.URL
    except Exception:
        return arg
    redacted = redact_secrets(text)
    return arg if redacted == text else redacted


def configure_logging(
    level: int = logging.INFO, fmt: str = FORMAT, stream: TextIO | None = None
) -> logging.Handler | None:
    """The root logger at `level` writing to stderr (or `stream`), libraries quiet, everything redacted.

    Like logging.basicConfig, a handler is added (and the level set) only when the root logger has none
    yet, or when `stream` is given; the handler added is returned. The library levels and the redaction
    of every root handler apply either way."""
    root = logging.getLogger()
    added: logging.Handler | None = None
    if stream is not None or not root.handlers:
        added = logging.StreamHandler(stream)
        added.setFormatter(logging.Formatter(fmt))
        root.addHandler(added)
        root.setLevel(level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    for handler in root.handlers:
        _add_redaction(handler)
    for name in _OWN_HANDLER_LOGGERS:
        _add_redaction(logging.getLogger(name))
    return added


def _add_redaction(target: logging.Handler | logging.Logger) -> None:
    if not any(isinstance(f, RedactSecrets) for f in target.filters):
        target.addFilter(RedactSecrets())
