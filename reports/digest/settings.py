"""The `digest:` mapping of the reports configuration (docs/reports.md), checked key by key: a wrong one
stops the collector's start with a message naming it. Secrets (webhook URLs, the SMTP password) are read
from files, so the YAML can be shared and versioned.

    digest:
      weekday: monday              # when the week's digest goes out (UTC); it covers the 7 days before
      hour_utc: 8
      accounts: all                # or a list of account names
      chat:
        - {kind: slack, url_file: /etc/gpuscope/digest-slack-url, accounts: [ml]}  # accounts: optional
      email:
        smtp_host: smtp.example.org
        from: gpuscope@example.org
        domain: example.org        # user -> user@example.org; or address_map_file: lines "user address"
      opt_out: [alice]
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
CHAT_KINDS = ("slack", "teams", "discord", "mattermost", "googlechat", "webhook")
KEYS = ("weekday", "hour_utc", "accounts", "chat", "email", "opt_out", "max_attempts", "top_users")
CHAT_KEYS = ("kind", "url_file", "name", "accounts")
EMAIL_KEYS = (
    "smtp_host", "smtp_port", "starttls", "username", "password_file", "from", "domain", "address_map_file",
    "min_idle_gpu_hours", "min_idle_share", "max_emails_per_user_per_week", "max_emails_per_run", "timeout_s",
    "opt_out_instructions",
)  # fmt: skip
# What may stand before the @ when an address is made from a user name: a user name with anything else in
# it (a newline, a quote, a second @, "bob\r\nBcc: x@y") gets no email rather than a surprising one.
LOCAL_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
DOMAIN = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*")


class DigestConfigError(ValueError):
    """A digest configuration gpuscope will not run with; the message names the key and says why."""


@dataclass(frozen=True)
class ChatTarget:
    name: str  # how logs and the delivery log name it (never by its URL: a secret)
    kind: str
    url: str = field(repr=False)
    accounts: tuple[str, ...] | None = None  # None: the digest's accounts


@dataclass(frozen=True)
class EmailSettings:
    smtp_host: str
    sender: str
    smtp_port: int = 587
    starttls: bool = True
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    domain: str | None = None
    address_map: dict[str, str] = field(default_factory=dict)
    min_idle_gpu_hours: float = 2.0
    min_idle_share: float = 0.25
    max_emails_per_user_per_week: int = 1
    max_emails_per_run: int = 200  # per cycle: the rest wait for the next one
    timeout_s: float = 30.0
    opt_out_instructions: str | None = None

    def address(self, user: str) -> str | None:
        """The user's address: from the map, else user@domain when the name is a plain one; else none."""
        if user in self.address_map:
            return self.address_map[user]
        if self.domain and LOCAL_PART.fullmatch(user):
            return f"{user}@{self.domain}"
        return None


@dataclass(frozen=True)
class DigestSettings:
    weekday: int = 0  # Monday
    hour_utc: int = 8
    accounts: tuple[str, ...] | None = None  # None: all
    chat: tuple[ChatTarget, ...] = ()
    email: EmailSettings | None = None
    opt_out: frozenset[str] = frozenset()
    max_attempts: int = 5  # per message and week: then it is given up, logged, and the week is done
    top_users: int = 5

    def accounts_for(self, target: ChatTarget) -> tuple[str, ...] | None:
        return target.accounts if target.accounts is not None else self.accounts


def digest_settings_from(raw: Any, base: Path = Path(), where: str = "digest") -> DigestSettings:
    """The settings in `raw` (the `digest:` mapping); relative file paths are read from `base`."""
    raw = _mapping(raw, where, KEYS)
    weekday = raw.get("weekday", "monday")
    if not isinstance(weekday, str) or weekday.lower() not in WEEKDAYS:
        raise DigestConfigError(f"{where}.weekday must be one of {', '.join(WEEKDAYS)}")
    chat = tuple(_chat(entry, i, base, f"{where}.chat[{i}]") for i, entry in enumerate(_list(raw, "chat", where)))
    names = [target.name for target in chat]
    if len(set(names)) != len(names):
        raise DigestConfigError(f"{where}.chat: each entry needs a name of its own (two are {_twice(names)!r})")
    email = raw.get("email")
    return DigestSettings(
        weekday=WEEKDAYS.index(weekday.lower()),
        hour_utc=_whole(raw, "hour_utc", 8, 0, 23, where),
        accounts=_accounts(raw.get("accounts", "all"), f"{where}.accounts"),
        chat=chat,
        email=None if email is None else _email(email, base, f"{where}.email"),
        opt_out=frozenset(_names(raw.get("opt_out", []), f"{where}.opt_out")),
        max_attempts=_whole(raw, "max_attempts", 5, 1, 100, where),
        top_users=_whole(raw, "top_users", 5, 0, 50, where),
    )


def _chat(raw: Any, index: int, base: Path, where: str) -> ChatTarget:
    raw = _mapping(raw, where, CHAT_KEYS)
    kind = raw.get("kind")
    if kind not in CHAT_KINDS:
        raise DigestConfigError(f"{where}.kind must be one of {', '.join(CHAT_KINDS)}, not {kind!r}")
    url = _secret_file(raw, "url_file", base, where, required=True) or ""
    if not url.startswith(("http://", "https://")):
        raise DigestConfigError(f"{where}.url_file: the URL in it must start with http:// or https://")
    name = raw.get("name", f"{kind}-{index}")
    if not isinstance(name, str) or not LOCAL_PART.fullmatch(name):
        raise DigestConfigError(f"{where}.name must be a short name of letters, digits, '.', '_', '+' or '-'")
    accounts = _accounts(raw["accounts"], f"{where}.accounts") if "accounts" in raw else None
    return ChatTarget(name=name, kind=kind, url=url, accounts=accounts)


def _email(raw: Any, base: Path, where: str) -> EmailSettings:
    raw = _mapping(raw, where, EMAIL_KEYS)
    host = raw.get("smtp_host")
    if not isinstance(host, str) or not DOMAIN.fullmatch(host):
        raise DigestConfigError(f"{where}.smtp_host is required: the SMTP server's host name or address")
    sender = raw.get("from")
    if not isinstance(sender, str) or not _is_address(sender):
        raise DigestConfigError(f"{where}.from is required: the emails' sender, such as gpuscope@example.org")
    domain = raw.get("domain")
    if domain is not None and (not isinstance(domain, str) or not DOMAIN.fullmatch(domain)):
        raise DigestConfigError(f"{where}.domain must be a domain name such as example.org")
    address_map = _address_map(raw, base, where)
    if domain is None and not address_map:
        raise DigestConfigError(f"{where}: give domain (user -> user@domain) or address_map_file, or both")
    username = raw.get("username")
    if username is not None and (not isinstance(username, str) or not username or "\n" in username):
        raise DigestConfigError(f"{where}.username must be the SMTP login's name")
    password = _secret_file(raw, "password_file", base, where, required=False)
    if (username is None) != (password is None):
        raise DigestConfigError(f"{where}: username and password_file go together (SMTP login), or neither")
    instructions = raw.get("opt_out_instructions")
    if instructions is not None and (not isinstance(instructions, str) or not 0 < len(instructions) <= 1000):
        raise DigestConfigError(f"{where}.opt_out_instructions must be a text of at most 1000 characters")
    starttls = raw.get("starttls", True)
    if not isinstance(starttls, bool):
        raise DigestConfigError(f"{where}.starttls must be true or false")
    return EmailSettings(
        smtp_host=host,
        sender=sender,
        smtp_port=_whole(raw, "smtp_port", 587, 1, 65535, where),
        starttls=starttls,
        username=username,
        password=password,
        domain=domain,
        address_map=address_map,
        min_idle_gpu_hours=_number(raw, "min_idle_gpu_hours", 2.0, 0, 1e6, where),
        min_idle_share=_number(raw, "min_idle_share", 0.25, 0, 1, where),
        max_emails_per_user_per_week=_whole(raw, "max_emails_per_user_per_week", 1, 0, 100, where),
        max_emails_per_run=_whole(raw, "max_emails_per_run", 200, 1, 100_000, where),
        timeout_s=_number(raw, "timeout_s", 30.0, 1, 600, where),
        opt_out_instructions=instructions,
    )


def _address_map(raw: dict[str, Any], base: Path, where: str) -> dict[str, str]:
    """address_map_file: one `user address` per line; blank lines and # comments are skipped."""
    if "address_map_file" not in raw:
        return {}
    path = base / str(raw["address_map_file"])
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DigestConfigError(f"{where}.address_map_file: cannot read {path}: {exc.strerror or exc}") from None
    found: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) != 2 or not _is_address(words[1]):
            raise DigestConfigError(f"{where}.address_map_file {path} line {number}: expected 'user address'")
        found[words[0]] = words[1]
    return found


def _secret_file(raw: dict[str, Any], key: str, base: Path, where: str, required: bool) -> str | None:
    if key not in raw:
        if required:
            raise DigestConfigError(f"{where}.{key} is required (the secret stays in that file, out of the YAML)")
        return None
    path = base / str(raw[key])
    try:
        value = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise DigestConfigError(f"{where}.{key}: cannot read {path}: {exc.strerror or exc}") from None
    if not value or "\n" in value:
        raise DigestConfigError(f"{where}.{key}: {path} must hold one line")
    return value


def _is_address(text: str) -> bool:
    local, at, domain = text.rpartition("@")
    return bool(at) and LOCAL_PART.fullmatch(local) is not None and DOMAIN.fullmatch(domain) is not None


def _accounts(raw: Any, where: str) -> tuple[str, ...] | None:
    if raw == "all":
        return None
    return tuple(_names(raw, where))


def _names(raw: Any, where: str) -> list[str]:
    if not isinstance(raw, list) or not all(isinstance(v, str) and v for v in raw):
        raise DigestConfigError(f"{where} must be a list of names" + (" or 'all'" if "accounts" in where else ""))
    return list(raw)


def _mapping(raw: Any, where: str, known: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise DigestConfigError(f"{where} must be a mapping")
    unknown = sorted(set(map(str, raw)) - set(known))
    if unknown:
        raise DigestConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return raw


def _list(raw: dict[str, Any], key: str, where: str) -> list[Any]:
    value = raw.get(key, [])
    if not isinstance(value, list):
        raise DigestConfigError(f"{where}.{key} must be a list")
    return value


def _whole(raw: dict[str, Any], key: str, default: int, lo: int, hi: int, where: str) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise DigestConfigError(f"{where}.{key} must be a whole number from {lo} to {hi}")
    return value


def _number(raw: dict[str, Any], key: str, default: float, lo: float, hi: float, where: str) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise DigestConfigError(f"{where}.{key} must be a number from {lo:g} to {hi:g}")
    if not lo <= value <= hi:
        raise DigestConfigError(f"{where}.{key} must be a number from {lo:g} to {hi:g}")
    return float(value)


def _twice(names: list[str]) -> str:
    return next(n for n in names if names.count(n) > 1)
