"""Checks run by `make demo` and `make test` before anything starts: say clearly what is missing."""

from __future__ import annotations

import sys


def check_postgres() -> str | None:
    from gpuscope.core.embedded_pg import PostgresNotFound, find_pg_bin

    try:
        find_pg_bin()
    except PostgresNotFound as exc:
        return str(exc)
    return None


CHECKS = {"postgres": check_postgres}


def main(names: list[str]) -> int:
    problems = [problem for name in names if (problem := CHECKS[name]()) is not None]
    for problem in problems:
        print(f"gpuscope: missing requirement: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
