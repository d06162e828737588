"""The collector core names none of the extensions' tables: the straggler watch, fleet health, the alerts
and the reports each read their own (stragglers/reads.py, health/reads.py, alerts/reads.py, ...) and hand
the core what it serves through their Part (collector/parts.py: routes, /metrics figures, job fields).
The schema's migrations (collector/store/migrations) still make every table; they are SQL, not scanned."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIGRATIONS = ROOT / "collector" / "store" / "migrations"
# An extension's tables, by the prefix of their names in the migrations.
PREFIXES = {"straggler": "stragglers", "health_": "health", "alert_": "alerts", "report_": "reports"}
# Named on purpose, with why. The store's hourly retention pass deletes old rows of every kept table,
# the straggler watch's too (moving that to the parts is a change of its own).
ALLOWED = {"collector/store/retention.py": {"straggler", "straggler_job_model"}}


def extension_tables() -> dict[str, str]:
    """Table -> the extension that owns it, from the CREATE TABLE statements of the migrations."""
    made = set()
    for migration in MIGRATIONS.glob("*.sql"):
        made |= set(re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", migration.read_text()))
    return {table: owner for table in made for prefix, owner in PREFIXES.items() if table.startswith(prefix)}


def named_tables(source: str, tables: set[str]) -> set[str]:
    """The tables a piece of Python names in SQL (FROM straggler, JOIN health_node, INSERT INTO ...) or as
    a quoted identifier ("straggler", sql.Identifier("alert_group")). Prose ("the straggler watch") is not
    a name: the SQL here is written in capitals, and a table in words is not quoted alone."""
    names = "|".join(sorted(map(re.escape, tables), key=len, reverse=True))
    in_sql = rf"\b(?:FROM|JOIN|INTO|UPDATE|TABLE|EXISTS)\s+(?:\w+\.)?({names})\b"
    quoted = rf"[\"']({names})[\"']"
    return set(re.findall(in_sql, source)) | set(re.findall(quoted, source))


def core_names(root: Path, tables: set[str]) -> dict[str, set[str]]:
    found = {}
    for path in sorted((root / "collector").rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        named = named_tables(path.read_text(), tables) - ALLOWED.get(relative, set())
        if named:
            found[relative] = named
    return found


def test_the_migrations_name_each_extensions_tables() -> None:
    owners = set(extension_tables().values())
    assert owners == set(PREFIXES.values()), owners  # the prefixes still find every extension's tables


def test_the_collector_core_names_no_extensions_table() -> None:
    tables = extension_tables()
    found = core_names(ROOT, set(tables))
    assert not found, {path: {t: tables[t] for t in named} for path, named in found.items()}


def test_a_query_over_an_extensions_table_is_caught() -> None:
    tables = {"straggler", "straggler_job_model", "health_node"}
    assert named_tables('conn.execute("SELECT model FROM straggler_job_model WHERE job_id = %s")', tables) == {
        "straggler_job_model"
    }
    assert named_tables('" FROM node n LEFT JOIN health_node h USING (node_id)"', tables) == {"health_node"}
    assert named_tables('sql.Identifier("straggler")', tables) == {"straggler"}
    prose = '"""Active stragglers, from the straggler watch (a straggler row per episode)."""'
    assert named_tables(prose, tables) == set()
