"""The shipped deployments keep the database password out of command lines, which `ps` shows to every
local user (and `kubectl describe` to anyone who can read the pod): the DSN comes from the environment
or the password from a file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
FILES = sorted(
    [*DEPLOY.glob("systemd/*.service"), *DEPLOY.glob("compose/*.yaml"), *DEPLOY.glob("kubernetes/**/*.yaml")]
)
# --db followed by its value, in a shell line, a YAML list or a JSON-style list
DB_ARGUMENT = re.compile(r"""--db["',\s=]+([^\s"',\]]+)""")


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(DEPLOY)) for p in FILES])
def test_no_dsn_with_a_password_in_a_command_line(path: Path) -> None:
    text = path.read_text()
    for value in DB_ARGUMENT.findall(text):
        assert "$" not in value, f"{path.name}: --db {value} puts a secret's contents into the command line"
        assert not re.search(r"://[^/@]*:[^/@]*@", value), f"{path.name}: --db {value} holds a password"


def test_the_pattern_finds_what_it_must() -> None:
    assert DB_ARGUMENT.findall('exec gpuscope collector --db "$(cat /run/dsn)"') == ["$(cat"]
    assert DB_ARGUMENT.findall('args: ["collector", "--db", "$(GPUSCOPE_DB)"]') == ["$(GPUSCOPE_DB)"]
    assert DB_ARGUMENT.findall('--db "postgresql://u:pw@h/db"') == ["postgresql://u:pw@h/db"]
    assert len(FILES) >= 6
