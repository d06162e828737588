"""A PostgreSQL DSN given on the command line, said in one line when it is wrong: its syntax checked
before anything starts (libpq parses it, no connection is made), and a connection that failed, with the
first line of libpq's reason. Both redacted: a DSN may carry a password."""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict

from gpuscope.core.logredact import redact_secrets


def check_dsn(dsn: str, option: str = "--db") -> None:
    """ValueError in words when libpq cannot parse `dsn` (given with `option`)."""
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise ValueError(f"{option} is not a PostgreSQL connection string: {first_line(exc)}") from None


def first_line(exc: BaseException) -> str:
    """psycopg's message, its first line only (libpq adds hints on more), without secrets."""
    lines = str(exc).strip().splitlines()
    return redact_secrets(lines[0] if lines else type(exc).__name__)
