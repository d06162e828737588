"""`gpuscope alerts check`: the SQL of a rules file is checked against the real schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscope.alerts.check import check_sql
from gpuscope.alerts.rules import default_rules_text, parse_rules
from gpuscope.cli import main

BROKEN = """
groups:
  - name: g
    rules:
      - alert: Misspelt
        expr: SELECT node, temperature AS value FROM gpu_latest
      - alert: RawTable
        expr: SELECT 1 AS value FROM gpu_sample
      - alert: NoValue
        expr: SELECT node FROM gpu_latest
      - alert: TextValue
        expr: SELECT node, uuid AS value FROM gpu_latest
      - alert: Fine
        expr: SELECT node, gpu, temp_c AS value FROM gpu_latest WHERE temp_c > 90
"""


def test_the_shipped_rules_pass_against_the_schema(adsn: str) -> None:
    assert check_sql(adsn, parse_rules(default_rules_text())) == []


def test_sql_problems_are_named_by_rule(adsn: str) -> None:
    problems = check_sql(adsn, parse_rules(BROKEN))
    assert len(problems) == 4
    assert 'rule Misspelt: column "temperature" does not exist' in problems[0]
    assert 'rule RawTable: relation "gpu_sample" does not exist' in problems[1], "rules see the views only"
    assert "rule NoValue: the query returns no 'value' column (columns: node)" in problems[2]
    assert "rule TextValue: 'value' must be numeric" in problems[3]


def test_the_command_checks_a_file_on_its_own_private_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(default_rules_text())
    assert main(["alerts", "check", str(rules)]) == 0
    assert "7 groups, 20 rules: OK" in capsys.readouterr().out


def test_the_command_reports_every_problem(adsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(BROKEN)
    assert main(["alerts", "check", str(rules), "--db", adsn]) == 1
    err = capsys.readouterr().err
    assert err.count(str(rules)) == 4 and "Misspelt" in err and "TextValue" in err
    rules.write_text(
        "groups:\n  - name: g\n    rules:\n      - alert: X\n        expr: SELECT 1 AS value\n        for: soon\n"
    )
    assert main(["alerts", "check", str(rules), "--db", adsn]) == 1
    assert "for: 'soon' is not a duration" in capsys.readouterr().err
    assert main(["alerts", "check", str(tmp_path / "missing.yaml")]) == 1
    assert "cannot read" in capsys.readouterr().err
