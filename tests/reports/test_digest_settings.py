"""The `digest:` mapping: defaults, secrets read from files, and a clear error naming each wrong key; the
email addresses made of user names, which a hostile name cannot bend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuscope.reports.config import reports_config_from
from gpuscope.reports.digest.settings import DigestConfigError, digest_settings_from
from gpuscope.reports.part import reports_part


def _email(**extra: Any) -> dict[str, Any]:
    return {"smtp_host": "smtp.example.org", "from": "gpuscope@example.org", "domain": "example.org", **extra}


def test_defaults_and_secrets_from_files(tmp_path: Path) -> None:
    (tmp_path / "slack-url").write_text("https://hooks.slack.com/services/T/B/secret\n")
    (tmp_path / "smtp-password").write_text("pa55word\n")
    (tmp_path / "addresses").write_text("# user address\nalice  alice.smith@example.com\n\nbob bob@lab.example\n")
    raw = {
        "chat": [{"kind": "slack", "url_file": "slack-url"}, {"kind": "webhook", "url_file": "slack-url", "name": "x"}],
        "email": _email(username="gpuscope", password_file="smtp-password", address_map_file="addresses"),
        "opt_out": ["carol"],
    }
    settings = digest_settings_from(raw, base=tmp_path)
    assert (settings.weekday, settings.hour_utc, settings.accounts, settings.max_attempts) == (0, 8, None, 5)
    assert [t.name for t in settings.chat] == ["slack-0", "x"]
    assert settings.chat[0].url == "https://hooks.slack.com/services/T/B/secret"
    assert "secret" not in repr(settings) and "pa55word" not in repr(settings), "secrets stay out of reprs"
    mail = settings.email
    assert mail is not None and mail.password == "pa55word"
    assert (mail.smtp_port, mail.starttls, mail.min_idle_gpu_hours, mail.min_idle_share) == (587, True, 2.0, 0.25)
    assert (mail.max_emails_per_user_per_week, mail.max_emails_per_run) == (1, 200)
    assert mail.address("alice") == "alice.smith@example.com", "the map first"
    assert mail.address("dave") == "dave@example.org", "then user@domain"
    assert settings.opt_out == {"carol"}
    accounts = digest_settings_from({"weekday": "Friday", "accounts": ["ml", "vision"]})
    assert (accounts.weekday, accounts.accounts) == (4, ("ml", "vision"))


@pytest.mark.parametrize(
    ("user", "address"),
    [
        ("bob\r\nBcc: x@y", None),
        ("bob\nBcc: x@y", None),
        ("eve@evil.example", None),
        ('"a b"', None),
        ("mallory,trent", None),
        ("-bob", None),
        ("system:serviceaccount:ns:sa", None),
        ("jane.doe", "jane.doe@example.org"),
        ("user_42+gpu", "user_42+gpu@example.org"),
    ],
)
def test_an_address_is_made_of_plain_user_names_only(user: str, address: str | None) -> None:
    mail = digest_settings_from({"email": _email()}).email
    assert mail is not None and mail.address(user) == address


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"weekday": "mon"}, "digest.weekday"),
        ({"hour_utc": 24}, "digest.hour_utc"),
        ({"hour_utc": True}, "digest.hour_utc"),
        ({"accounts": "some"}, "digest.accounts"),
        ({"frequency": "daily"}, "digest.frequency: unknown key"),
        ({"chat": {"kind": "slack"}}, "digest.chat: expected a list"),
        ({"chat": [{"kind": "irc", "url_file": "u"}]}, "digest.chat[0].kind"),
        ({"chat": [{"kind": "slack"}]}, "digest.chat[0].url_file: required key missing"),
        ({"chat": [{"kind": "slack", "url_file": "missing"}]}, "digest.chat[0].url_file: cannot read"),
        ({"chat": [{"kind": "slack", "url_file": "not-http"}]}, "must start with http"),
        ({"chat": [{"kind": "slack", "url_file": "url", "url": "https://x"}]}, "digest.chat[0].url: unknown key"),
        ({"chat": [{"kind": "slack", "url_file": "url", "name": "ops"}] * 2}, "a name of its own"),
        ({"email": _email(smtp_port=0)}, "digest.email.smtp_port"),
        ({"email": _email(starttls="yes")}, "digest.email.starttls"),
        ({"email": {**_email(), "from": "bob\r\nBcc: x@y"}}, "digest.email.from"),
        ({"email": {"smtp_host": "h", "from": "a@b.c"}}, "give domain"),
        ({"email": _email(domain="exa mple.org")}, "digest.email.domain"),
        ({"email": _email(username="u")}, "username and password_file"),
        ({"email": _email(min_idle_share=1.5)}, "digest.email.min_idle_share"),
        ({"email": _email(max_emails_per_run=0)}, "digest.email.max_emails_per_run"),
        ({"email": _email(address_map_file="bad-map")}, "address_map_file"),
        ({"opt_out": "alice"}, "digest.opt_out"),
    ],
)
def test_a_wrong_key_is_named(tmp_path: Path, raw: dict[str, Any], named: str) -> None:
    (tmp_path / "url").write_text("https://chat.example/hook")
    (tmp_path / "not-http").write_text("ftp://chat.example/hook")
    (tmp_path / "bad-map").write_text("alice\n")
    with pytest.raises(DigestConfigError) as caught:
        digest_settings_from(raw, base=tmp_path)
    assert named in str(caught.value)


def test_the_collector_part_checks_the_digest_at_start(tmp_path: Path) -> None:
    (tmp_path / "url").write_text("https://chat.example/hook")
    config = reports_config_from({"digest": {"chat": [{"kind": "slack", "url_file": str(tmp_path / "url")}]}})
    part = reports_part(config)
    assert [task.name for task in part.leader_tasks] == ["digest scheduler"]
    assert len(part.routers) == 2
    assert reports_part().leader_tasks == (), "no digest configured: no scheduler, the opt-out API all the same"
    with pytest.raises(DigestConfigError, match=r"digest\.weekday"):
        reports_part(reports_config_from({"digest": {"weekday": "someday"}}))
