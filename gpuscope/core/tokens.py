"""Reading bearer tokens from files, for the exporter (sender) and the collector (checker) alike."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

log = logging.getLogger(__name__)


class TokenError(RuntimeError):
    pass


def read_token_file(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TokenError(f"cannot read token file {path}: {exc.strerror}") from None
    token = text.strip()
    if not token or "\n" in token:
        raise TokenError(f"token file {path} must hold exactly one non-empty line")
    if path.stat().st_mode & (stat.S_IRGRP | stat.S_IROTH):
        log.warning("token file %s is readable by other users; chmod 600 it", path)
    return token


def dsn_with_password_file(dsn: str, password_file: Path | None) -> str:
    """`dsn` with the password held in `password_file` (one line), so that the password never appears in
    a command line (ps shows every process's arguments to every local user) or in a unit file."""
    if password_file is None:
        return dsn
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        given = conninfo_to_dict(dsn)
    except Exception as exc:  # psycopg.ProgrammingError: the DSN does not parse
        raise TokenError(f"the database DSN does not parse: {type(exc).__name__}") from None
    if "password" in given:
        raise TokenError("the database DSN holds a password and a password file is given too: keep only the file")
    return make_conninfo(dsn, password=read_token_file(password_file))
