"""What the `gpuscope` command says when something is wrong, as a user runs it: one line in words (the
collector's reason, not its JSON; which token file a refusal concerns), a subcommand's own usage for an
option it does not know, a version, and no empty password hashed."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from gpuscope.alerts import views
from tests.commands import GPUSCOPE, token_file
from tests.processes import RunningCollector, running_collector

READ_TOKEN = "read-token-for-cli-messages"
RULES = Path(__file__).resolve().parents[1] / "alerts" / "default_rules.yaml"


def run(*args: str, **options: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUSCOPE, *args], capture_output=True, text=True, timeout=120, check=False, **options)


def test_version() -> None:
    done = run("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == "gpuscope 0.1.0"


@pytest.mark.parametrize(
    ("args", "usage"),
    [
        (["collector", "--no-such-option"], "usage: gpuscope collector "),
        (["alerts", "silence", "list", "--no-such-option"], "usage: gpuscope alerts silence list "),
        (["jobstats", "j1", "--no-such-option"], "usage: gpuscope jobstats "),
    ],
)
def test_an_unknown_option_shows_the_subcommands_usage(args: list[str], usage: str) -> None:
    done = run(*args)
    assert done.returncode == 2
    assert done.stderr.startswith(usage), done.stderr
    command = usage.removeprefix("usage: ").strip()
    assert done.stderr.splitlines()[-1] == f"{command}: error: unrecognized arguments: --no-such-option"


def test_an_empty_password_is_not_hashed() -> None:
    # A session of its own has no terminal: getpass reads the password from stdin, as it would be typed.
    done = run("dashboard", "--hash-password", input="\n", start_new_session=True)
    assert done.returncode == 2
    assert "pbkdf2" not in done.stdout
    assert "gpuscope dashboard: error: the password is empty" in done.stderr
    typed = run("dashboard", "--hash-password", input="s3cret-enough\n", start_new_session=True)
    assert typed.returncode == 0 and typed.stdout.startswith("pbkdf2_sha256$"), typed.stderr


@pytest.fixture
def guarded(dsn: str) -> Iterator[RunningCollector]:
    with running_collector(dsn, read_token=READ_TOKEN) as collector:
        yield collector


def test_a_refusal_is_the_collectors_reason_in_words(collector: RunningCollector) -> None:
    done = run("jobstats", "999999", "--collector", collector.url)
    assert done.returncode == 1
    assert done.stderr.strip() == "gpuscope: error: no job '999999' (HTTP 404)", done.stderr
    assert '{"detail"' not in done.stderr


def test_a_refused_token_names_its_file_or_says_none_was_given(guarded: RunningCollector, tmp_path: Path) -> None:
    none = run("jobstats", "j1", "--collector", guarded.url)
    assert none.returncode == 1
    assert none.stderr.strip() == (
        "gpuscope: error: missing or invalid bearer token (HTTP 401): no token was given;"
        " pass --token-file FILE with the collector's token"
    )
    wrong = token_file(tmp_path / "wrong-token", "not-the-read-token-at-all")
    refused = run("health", "status", "--collector", guarded.url, "--token-file", str(wrong))
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        "gpuscope: error: missing or invalid bearer token (HTTP 401):"
        f" the collector does not accept the token in {wrong}"
    )
    assert "not-the-read-token-at-all" not in refused.stderr


def split_password(dsn: str) -> tuple[str, str]:
    params = conninfo_to_dict(dsn)
    password = str(params.pop("password"))
    return make_conninfo(**{k: str(v) for k, v in params.items()}), password


@pytest.mark.parametrize(
    ("db", "line"),
    [
        ("notadsn", 'gpuscope alerts: error: --db is not a PostgreSQL connection string: missing "=" after'),
        (
            "postgresql://u:hunter2@127.0.0.1:9/x",
            "gpuscope alerts: error: cannot connect to the database given with --db: connection failed:",
        ),
    ],
)
def test_alerts_check_says_what_is_wrong_with_db(db: str, line: str) -> None:
    done = run("alerts", "check", str(RULES), "--db", db)
    assert done.returncode == 2
    assert done.stderr.startswith(line), done.stderr
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
    assert "hunter2" not in done.stderr


def test_alerts_check_takes_the_password_from_a_file(dsn: str, tmp_path: Path) -> None:
    views.apply(dsn)  # what the rules read, as a collector's database has it
    bare, password = split_password(dsn)
    no_libpq_settings = {name: value for name, value in os.environ.items() if not name.startswith("PG")}
    missing = run("alerts", "check", str(RULES), "--db", bare, env=no_libpq_settings)
    assert missing.returncode == 2
    assert "cannot connect to the database given with --db" in missing.stderr
    assert missing.stderr.strip().endswith("(give it with --db-password-file FILE)"), missing.stderr
    secret = token_file(tmp_path / "db-password", password)
    checked = run("alerts", "check", str(RULES), "--db", bare, "--db-password-file", str(secret))
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.strip().endswith("rules: OK")
