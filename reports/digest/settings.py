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

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from gpuscope.core.config_file import ConfigProblem, FileModel, Key, checked, read_named_file

Weekday = Literal["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
WEEKDAYS: tuple[str, ...] = get_args(Weekday)
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


def _matching(pattern: re.Pattern[str], what: str) -> AfterValidator:
    def check(text: str) -> str:
        if not pattern.fullmatch(text):
            raise ValueError(f"must be {what}, got {text!r}")
        return text

    return AfterValidator(check)


def _is_address(text: str) -> bool:
    local, at, domain = text.rpartition("@")
    return bool(at) and LOCAL_PART.fullmatch(local) is not None and DOMAIN.fullmatch(domain) is not None


def _address(text: str) -> str:
    if not _is_address(text):
        raise ValueError(f"must be an address such as gpuscope@example.org, got {text!r}")
    return text


def _all_or_list(value: Any) -> Any:
    """`all` is every account (None); otherwise a list of names."""
    if value == "all":
        return None
    if not isinstance(value, list):
        raise ValueError(f"must be 'all' or a list of names, got {value!r}")
    return value


Name = Annotated[str, Field(min_length=1)]
Accounts = Annotated[list[Name] | None, BeforeValidator(_all_or_list)]
Domain = Annotated[str, _matching(DOMAIN, "a domain name such as example.org")]
ShortName = Annotated[str, _matching(LOCAL_PART, "a short name of letters, digits, '.', '_', '+' or '-'")]


class ChatFile(FileModel):
    kind: Literal["slack", "teams", "discord", "mattermost", "googlechat", "webhook"]
    url_file: str  # the secret stays in that file, out of the YAML
    name: ShortName | None = None  # default: KIND-INDEX
    accounts: Accounts = None  # None: the digest's accounts


class EmailFile(FileModel):
    smtp_host: Annotated[str, _matching(DOMAIN, "the SMTP server's host name or address")]
    sender: Annotated[str, AfterValidator(_address)] = Field(alias="from")
    smtp_port: Annotated[int, Field(ge=1, le=65535)] = 587
    starttls: bool = True
    username: Annotated[str, _matching(re.compile(r"[^\n]+"), "the SMTP login's name")] | None = None
    password_file: str | None = None
    domain: Domain | None = None
    address_map_file: str | None = None
    min_idle_gpu_hours: Annotated[float, Field(ge=0, le=1e6)] = 2.0
    min_idle_share: Annotated[float, Field(ge=0, le=1)] = 0.25
    max_emails_per_user_per_week: Annotated[int, Field(ge=0, le=100)] = 1
    max_emails_per_run: Annotated[int, Field(ge=1, le=100_000)] = 200
    timeout_s: Annotated[float, Field(ge=1, le=600)] = 30.0
    opt_out_instructions: Annotated[str, Field(min_length=1, max_length=1000)] | None = None

    @model_validator(mode="after")
    def _login_whole(self) -> EmailFile:
        if (self.username is None) != (self.password_file is None):
            raise ValueError("username and password_file go together (SMTP login), or neither")
        return self


class DigestFile(FileModel):
    weekday: Annotated[Weekday, BeforeValidator(lambda v: v.lower() if isinstance(v, str) else v)] = "monday"
    hour_utc: Annotated[int, Field(ge=0, le=23)] = 8
    accounts: Accounts = None
    chat: list[ChatFile] = Field(default_factory=list)
    email: EmailFile | None = None
    opt_out: list[Name] = Field(default_factory=list)
    max_attempts: Annotated[int, Field(ge=1, le=100)] = 5
    top_users: Annotated[int, Field(ge=0, le=50)] = 5


def digest_settings_from(raw: Any, base: Path = Path(), where: str = "digest") -> DigestSettings:
    """The settings in `raw` (the `digest:` mapping); relative file paths are read from `base`."""
    return checked(DigestFile, raw, DigestConfigError, lambda digest: _settings(digest, base), at=(where,))


def _settings(digest: DigestFile, base: Path) -> DigestSettings:
    chat = tuple(_chat(target, i, base) for i, target in enumerate(digest.chat))
    names = [target.name for target in chat]
    for name in names:
        if names.count(name) > 1:
            raise ConfigProblem(("chat",), f"each entry needs a name of its own (two are {name!r})")
    return DigestSettings(
        weekday=WEEKDAYS.index(digest.weekday),
        hour_utc=digest.hour_utc,
        accounts=_tuple(digest.accounts),
        chat=chat,
        email=None if digest.email is None else _email(digest.email, base),
        opt_out=frozenset(digest.opt_out),
        max_attempts=digest.max_attempts,
        top_users=digest.top_users,
    )


def _chat(target: ChatFile, index: int, base: Path) -> ChatTarget:
    at = ("chat", index, "url_file")
    url = _secret(base / target.url_file, at)
    if not url.startswith(("http://", "https://")):
        raise ConfigProblem(at, "the URL in it must start with http:// or https://")
    name = target.name or f"{target.kind}-{index}"
    return ChatTarget(name=name, kind=target.kind, url=url, accounts=_tuple(target.accounts))


def _email(mail: EmailFile, base: Path) -> EmailSettings:
    address_map = _address_map(base / mail.address_map_file) if mail.address_map_file else {}
    if mail.domain is None and not address_map:
        raise ConfigProblem(("email",), "give domain (user -> user@domain) or address_map_file, or both")
    password = _secret(base / mail.password_file, ("email", "password_file")) if mail.password_file else None
    return EmailSettings(
        **mail.model_dump(exclude={"password_file", "address_map_file"}),
        password=password,
        address_map=address_map,
    )


def _address_map(path: Path) -> dict[str, str]:
    """address_map_file: one `user address` per line; blank lines and # comments are skipped."""
    at = ("email", "address_map_file")
    found: dict[str, str] = {}
    for number, line in enumerate(read_named_file(path, at).splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if words and (len(words) != 2 or not _is_address(words[1])):
            raise ConfigProblem(at, f"{path} line {number}: expected 'user address'")
        if words:
            found[words[0]] = words[1]
    return found


def _secret(path: Path, at: Key) -> str:
    value = read_named_file(path, at).strip()
    if not value or "\n" in value:
        raise ConfigProblem(at, f"{path} must hold one line")
    return value


def _tuple(names: list[str] | None) -> tuple[str, ...] | None:
    return None if names is None else tuple(names)
